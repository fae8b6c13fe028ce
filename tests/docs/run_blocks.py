#!/usr/bin/env python3
"""Runs the shell blocks of the README and the guides that are marked
runnable, as written, and checks that every relative link resolves.

A block is runnable when the line before its opening fence is
`<!-- runnable -->`. It runs under `bash -euo pipefail` from the source
root; the programs it names under `build/` (`./build/...`, `$OLDPWD/build/...`)
are taken from the build directory under test. Usage:
run_blocks.py SOURCE_DIR BUILD_DIR
"""
import pathlib
import re
import subprocess
import sys
import time

MARK = "<!-- runnable -->"
BUILD_PATH = re.compile(r"(?<![\w/.])(\./|\$OLDPWD/)build/")
LINK = re.compile(r"\]\(([^)#\s]+)(#[^)]*)?\)")


def documents(root):
    return [root / "README.md"] + sorted((root / "docs").glob("*.md"))


def runnable_blocks(path):
    lines = path.read_text().split("\n")
    for i, line in enumerate(lines):
        if line.strip() != MARK:
            continue
        if i + 1 >= len(lines) or not lines[i + 1].startswith("```sh"):
            raise SystemExit(f"{path}:{i + 1}: '{MARK}' is not followed by a ```sh block")
        end = next((j for j in range(i + 2, len(lines)) if lines[j].startswith("```")), None)
        if end is None:
            raise SystemExit(f"{path}:{i + 2}: the block never closes")
        yield i + 2, "\n".join(lines[i + 2:end])


def broken_links(root, path):
    out = []
    for n, line in enumerate(path.read_text().split("\n"), 1):
        for m in LINK.finditer(line):
            target = m.group(1)
            if "://" in target or target.startswith("mailto:"):
                continue
            if not (path.parent / target).exists():
                out.append(f"{path.relative_to(root)}:{n}: link to {target}, which does not exist")
    return out


def main():
    root, build = pathlib.Path(sys.argv[1]).resolve(), pathlib.Path(sys.argv[2]).resolve()
    broken = [b for doc in documents(root) for b in broken_links(root, doc)]
    for b in broken:
        print(b)
    blocks = [(doc, line, text) for doc in documents(root) for line, text in runnable_blocks(doc)]
    if not blocks:
        print("no runnable block found: the README's quick start should be one")
        return 1
    failed = len(broken)
    for doc, line, text in blocks:
        where = f"{doc.relative_to(root)}:{line}"
        script = BUILD_PATH.sub(str(build) + "/", text)
        start = time.monotonic()
        try:
            run = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=root,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                 timeout=300)
            rc, output = run.returncode, run.stdout
        except subprocess.TimeoutExpired as e:
            rc, output = "timeout (300 s)", (e.stdout or b"").decode(errors="replace")
        took = time.monotonic() - start
        if rc != 0:
            failed += 1
            print(f"FAILED {where} ({rc}) after {took:.1f} s:\n{script}\n--- its output (tail):")
            print("\n".join(output.rstrip().split("\n")[-30:]))
        else:
            print(f"ok {where} in {took:.1f} s")
    print(f"{len(blocks)} runnable blocks, {failed} failures or broken links")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
