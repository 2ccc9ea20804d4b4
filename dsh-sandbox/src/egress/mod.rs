//! Egress by name ([`SandboxPolicy::allow_domains`](crate::SandboxPolicy::allow_domains)):
//! the allow list, and (feature `egress`, Linux) the proxy the host runs
//! for the confined shells, reached inside at `127.0.0.1:`[`EGRESS_PORT`].

mod rules;

#[cfg(all(feature = "egress", target_os = "linux"))]
mod proxy;

pub use rules::AllowList;

#[cfg(all(feature = "egress", target_os = "linux"))]
use proxy::EgressProxy;
#[cfg(all(feature = "egress", target_os = "linux"))]
pub use proxy::{EgressLimits, Resolve, SystemResolver};

/// The port of the proxy inside every confined shell's own network
/// namespace (`127.0.0.1:3128`; nothing else listens there unless the
/// shell does).
pub const EGRESS_PORT: u16 = 3128;

/// The proxy variables a confined shell gets: `HTTP_PROXY`, `HTTPS_PROXY`,
/// `ALL_PROXY` and their lower-case forms naming the proxy, `NO_PROXY` and
/// `no_proxy` empty.
///
/// ```
/// let env = dsh_sandbox::egress_env();
/// assert!(env.contains(&("https_proxy".to_owned(), "http://127.0.0.1:3128".to_owned())));
/// assert!(env.contains(&("NO_PROXY".to_owned(), String::new())));
/// ```
pub fn egress_env() -> Vec<(String, String)> {
    let url = format!("http://127.0.0.1:{EGRESS_PORT}");
    let mut env: Vec<(String, String)> = ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"]
        .iter()
        .flat_map(|name| [name.to_string(), name.to_ascii_lowercase()])
        .map(|name| (name, url.clone()))
        .collect();
    env.push(("NO_PROXY".to_owned(), String::new()));
    env.push(("no_proxy".to_owned(), String::new()));
    env
}

/// The server's proxy as the tool holds it (made by
/// [`Egress::for_config`] when the policy allows domains).
#[derive(Debug)]
pub(crate) struct Egress {
    #[cfg(all(feature = "egress", target_os = "linux"))]
    proxy: std::sync::Arc<EgressProxy>,
}

impl Egress {
    /// The proxy `config` asks for (`None`: no allowed domain), or why it
    /// cannot be enforced.
    pub(crate) fn for_config(
        config: &crate::SandboxConfig,
    ) -> Result<Option<Egress>, crate::SandboxError> {
        use crate::SandboxError::EgressConflict;
        let policy = &config.policy;
        let allowed = AllowList::parse(&policy.allow_domains)?;
        if allowed.is_empty() {
            return Ok(None);
        }
        if policy.network {
            return Err(EgressConflict {
                why: "`network` already opens every address (set one or the other)",
            });
        }
        if policy.mode == crate::SandboxMode::DangerFullAccess {
            return Err(EgressConflict {
                why: "danger-full-access has no sandbox to keep the shell off the network",
            });
        }
        if policy.bubblewrap.is_some() {
            return Err(EgressConflict {
                why: "bubblewrap cannot hand the proxy's listener to the host (use the built-in namespaces)",
            });
        }
        #[cfg(all(feature = "egress", target_os = "linux"))]
        {
            let resolver = config
                .egress_resolver
                .clone()
                .unwrap_or_else(|| std::sync::Arc::new(SystemResolver));
            let proxy = EgressProxy::new(allowed, resolver, config.egress_limits);
            Ok(Some(Egress {
                proxy: std::sync::Arc::new(proxy),
            }))
        }
        #[cfg(not(all(feature = "egress", target_os = "linux")))]
        Err(EgressConflict {
            why: "this build has no egress proxy (Linux, with dsh-sandbox's `egress` feature)",
        })
    }

    /// Serves the listeners of `confinement`'s shells (on the current
    /// runtime) until it is dropped.
    #[cfg(target_os = "linux")]
    pub(crate) fn serve(
        &self,
        confinement: &mut dsh_confine::Confinement,
    ) -> Result<(), crate::SandboxError> {
        #[cfg(feature = "egress")]
        if let Some(listeners) = confinement.egress_listeners() {
            self.proxy
                .serve(listeners)
                .map_err(|e| crate::SandboxError::setup_from("serving the egress proxy", e))?;
        }
        #[cfg(not(feature = "egress"))]
        let _ = confinement;
        Ok(())
    }
}
