#!/usr/bin/env python3
"""Fail when a packaged crate's source includes a file from outside its package.

`cargo package --no-verify` does not build the packaged sources, so an
`include_str!` / `include_bytes!` reaching into the workspace (example data, a shared
README) would only break for users of the published crate. Reads every
`<dir>/*.crate` and resolves each literal include path against the including file;
includes on a line right after a `#[cfg(...doctest...)]` are skipped (they are only
compiled by rustdoc's doctest runner, from the workspace).
"""
import os
import posixpath
import re
import sys
import tarfile

INCLUDE = re.compile(r'include_(?:str|bytes)!\(\s*"([^"]+)"\s*\)')


def main(pkg_dir: str) -> int:
    crates = sorted(f for f in os.listdir(pkg_dir) if f.endswith(".crate"))
    if not crates:
        print(f"no .crate files in {pkg_dir}")
        return 1
    bad = []
    for crate in crates:
        with tarfile.open(os.path.join(pkg_dir, crate)) as tar:
            members = {m.name: m for m in tar.getmembers() if m.isfile()}
            for name, m in members.items():
                if not name.endswith(".rs"):
                    continue
                lines = tar.extractfile(m).read().decode("utf-8", "replace").splitlines()
                for i, line in enumerate(lines):
                    for path in INCLUDE.findall(line):
                        if i > 0 and "doctest" in lines[i - 1] and "cfg" in lines[i - 1]:
                            continue
                        target = posixpath.normpath(
                            posixpath.join(posixpath.dirname(name), path)
                        )
                        if target not in members:
                            bad.append(f"{name}:{i + 1}: includes {path} (not in {crate})")
    for b in bad:
        print(b)
    print(f"{len(crates)} packages checked: {len(bad)} include(s) from outside a package")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "target/package"))
