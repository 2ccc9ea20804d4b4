#!/usr/bin/env python3
"""Foreign types in the public API of the workspace's library crates.

Reads rustdoc's JSON of each crate (`target/doc/<crate>.json`, written by
`.ci/public-api-check`) and walks what a user can reach from the crate root:
modules, re-exports, items, their fields, variants, signatures, generics and
impls. Every type or trait named there must come from the crate itself, from
the standard library (or tokio, see AMBIENT), or from a crate the crate
re-exports (`pub use
serde_json;`, or the item itself: `pub use bollard::Docker;`), directly or
through a re-exported crate of the workspace. Anything else is a leak: a
user would need a matching version of that crate of their own to name it.

Blanket and auto-trait impls are skipped (they are the implementing crate's,
not ours), and so are impls of the traits in TRAIT_IMPLS_ALLOWED, the
ecosystem's ways to interoperate.

Usage: public_api_leaks.py DOC_DIR CRATE...   (exit 1 on a leak)
"""

import json
import sys
from pathlib import Path

# The standard library, and tokio: the runtime every host of these crates
# runs them on and depends on itself (README "Use it as a library"), so its
# I/O traits in a signature ask for nothing the host lacks.
AMBIENT = {"std", "core", "alloc", "proc_macro", "tokio"}

# The ecosystem's interfaces: serde's traits say a type can be read from
# and written to JSON (a host that uses them has serde anyway), `Stream` is
# how async code consumes a sequence. An impl of one of these is skipped
# whole (its methods name the trait's own types).
TRAIT_IMPLS_ALLOWED = {
    ("serde", "Serialize"),
    ("serde", "Deserialize"),
    ("serde_core", "Serialize"),
    ("serde_core", "Deserialize"),
    ("futures_core", "Stream"),
}


class Crate:
    def __init__(self, doc_dir, name):
        path = Path(doc_dir) / f"{name}.json"
        self.name = name
        self.doc = json.loads(path.read_text())
        self.index = self.doc["index"]
        self.paths = self.doc["paths"]
        self.external = {
            int(k): v["name"] for k, v in self.doc["external_crates"].items()
        }
        # What the crate re-exports from other crates: whole crates, items.
        self.reexported_crates = set()
        self.reexported_items = set()
        self.reached = []
        self.walk()

    def crate_of(self, id_):
        summary = self.paths.get(str(id_))
        if summary is None:
            item = self.index.get(str(id_))
            return None if item is None else self.external.get(item["crate_id"], self.name)
        crate_id = summary["crate_id"]
        if crate_id == 0:
            return self.name
        return self.external.get(crate_id, "?")

    def full_path(self, id_):
        summary = self.paths.get(str(id_))
        return "::".join(summary["path"]) if summary else f"<id {id_}>"

    def walk(self):
        """Collects (where, item) for every item a user can reach."""
        seen = set()
        todo = [("", self.doc["root"])]
        while todo:
            where, id_ = todo.pop()
            if id_ is None or id_ in seen:
                continue
            seen.add(id_)
            item = self.index.get(str(id_))
            if item is None:
                continue
            if item["crate_id"] != 0 and "use" not in item["inner"]:
                continue
            name = item.get("name")
            here = (f"{where}::{name}" if where else name) if name else where
            (kind, inner), = item["inner"].items()
            if kind == "use":
                self.note_reexport(inner)
                todo.append((where, inner.get("id")))
                continue
            if kind == "impl" and (inner.get("is_synthetic") or inner.get("blanket_impl")):
                continue
            if kind == "impl" and inner.get("trait") and self.allowed_trait(inner["trait"]["id"]):
                continue
            self.reached.append((here, kind, inner))
            for child in children(kind, inner):
                todo.append((here, child))

    def allowed_trait(self, id_):
        crate = self.crate_of(id_)
        summary = self.paths.get(str(id_))
        name = summary["path"][-1] if summary else None
        return (crate, name) in TRAIT_IMPLS_ALLOWED

    def note_reexport(self, use):
        target = use.get("id")
        if target is None:
            return
        crate = self.crate_of(target)
        if crate in (None, self.name):
            return
        summary = self.paths.get(str(target))
        if summary and summary["kind"] == "module" and len(summary["path"]) == 1:
            self.reexported_crates.add(crate)
        elif use.get("is_glob"):
            self.reexported_crates.add(crate)
        else:
            self.reexported_items.add(target)


def children(kind, inner):
    """The ids of the items that belong to an item."""
    if kind == "module":
        return inner.get("items", [])
    if kind in ("struct", "union"):
        out = list(inner.get("impls", []))
        k = inner.get("kind")
        if isinstance(k, dict):
            if "plain" in k:
                out += k["plain"]["fields"]
            if "tuple" in k:
                out += [f for f in k["tuple"] if f is not None]
        out += inner.get("fields", []) if kind == "union" else []
        return out
    if kind == "enum":
        return list(inner.get("variants", [])) + list(inner.get("impls", []))
    if kind == "variant":
        k = inner.get("kind")
        if isinstance(k, dict):
            if "tuple" in k:
                return [f for f in k["tuple"] if f is not None]
            if "struct" in k:
                return k["struct"]["fields"]
        return []
    if kind in ("trait", "impl"):
        return inner.get("items", [])
    return []


def named_paths(node, out):
    """Every path (`{"path", "id", "args"}`) named inside a type, signature or bound."""
    if isinstance(node, dict):
        if "id" in node and "path" in node and isinstance(node.get("path"), str):
            out.append(node["id"])
        for key, value in node.items():
            # Ids of child items are walked as items, not as names.
            if key in ("items", "impls", "variants", "fields", "implementations"):
                continue
            named_paths(value, out)
    elif isinstance(node, list):
        for value in node:
            named_paths(value, out)


def leaks(crate, allowed_crates):
    found = []
    for where, kind, inner in crate.reached:
        ids = []
        named_paths(inner, ids)
        for id_ in ids:
            owner = crate.crate_of(id_)
            if owner in (None, crate.name) or owner in AMBIENT or owner in allowed_crates:
                continue
            if id_ in crate.reexported_items:
                continue
            path = crate.full_path(id_)
            found.append(f"{where} ({kind}) names {path} of `{owner}`")
    return sorted(set(found))


def main():
    doc_dir, names = sys.argv[1], sys.argv[2:]
    crates = {name: Crate(doc_dir, name) for name in names}

    def allowed(name, stack=()):
        direct = crates[name].reexported_crates
        out = set(direct)
        for other in direct:
            if other in crates and other not in stack:
                out |= allowed(other, stack + (name,))
        return out

    bad = 0
    for name, crate in crates.items():
        found = leaks(crate, allowed(name))
        for line in found:
            print(f"{name}: {line}")
        bad += len(found)
        print(f"{name}: {len(crate.reached)} public items, {len(found)} foreign names not re-exported",
              file=sys.stderr)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
