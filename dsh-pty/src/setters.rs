//! The chainable setters of the workspace's settings types.

/// Chainable setters for a settings type: one method per named field,
/// taking the field's value and returning the value it was called on.
/// Each is documented as setting its field, unless doc comments written
/// before the field say what it does instead (for a field that is not
/// public, which the default text would link to).
///
/// The settings types of this crate ([`ResourceLimits`](crate::ResourceLimits))
/// and of the crates above it (the shell's, the sandbox's and the
/// confinement's) are made this way.
///
/// ```
/// #[derive(Debug, Default)]
/// pub struct Knobs {
///     /// How loud.
///     pub volume: u8,
///     /// Whether it hums.
///     pub hum: bool,
///     quiet: bool,
/// }
///
/// dsh_pty::setters!(Knobs {
///     volume: u8,
///     hum: bool,
///     /// Turns everything down.
///     quiet: bool,
/// });
///
/// let knobs = Knobs::default().volume(11).hum(true).quiet(true);
/// assert_eq!((knobs.volume, knobs.hum, knobs.quiet), (11, true, true));
/// ```
#[macro_export]
macro_rules! setters {
    (@one $ty:ident $field:ident $fty:ty []) => {
        #[doc = concat!("Sets [`", stringify!($ty), "::", stringify!($field), "`].")]
        #[must_use]
        pub fn $field(mut self, $field: $fty) -> Self {
            self.$field = $field;
            self
        }
    };
    (@one $ty:ident $field:ident $fty:ty [$($doc:tt)+]) => {
        $($doc)+
        #[must_use]
        pub fn $field(mut self, $field: $fty) -> Self {
            self.$field = $field;
            self
        }
    };
    ($ty:ident { $($(#[$doc:meta])* $field:ident: $fty:ty),* $(,)? }) => {
        impl $ty {
            $($crate::setters!(@one $ty $field $fty [$(#[$doc])*]);)*
        }
    };
}
