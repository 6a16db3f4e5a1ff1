#!/usr/bin/env python3
"""The layering of the components (docs/ARCHITECTURE.md): every quoted #include of a component's
sources resolves to a header of the same component or of one it may depend on, header names are
unique across components (they are included without their folder), public headers include only
public headers, and core includes neither ICU nor CUDA (outside the `#ifdef __CUDACC__` sections
that only the CUDA sources of higher layers compile). Exits non-zero naming each violation."""

import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent

# What each component may include, besides itself and the public headers (include/skipsoftmax).
ALLOWED = {
    "core": set(),
    "attention": {"core"},
    "model": {"core"},
    "engine": {"model", "attention", "core"},
    "calibration": {"model", "core"},
    "evaluation": {"calibration", "model", "core"},
    "tools": {"evaluation", "calibration", "engine", "model", "attention", "core"},
}
# System headers a component must not include.
FORBIDDEN_SYSTEM = {
    "core": re.compile(r"^(unicode/|cuda|cublas|cudnn|nvrtc|cute/|cutlass/)"),
    "model": re.compile(r"^(cuda|cublas|cudnn)"),
}
SOURCE_SUFFIXES = {".h", ".cpp", ".cu", ".cuh"}
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)
GENERATED = {"skipsoftmax_git_revision.h"}  # written into the build tree
CUDA_ONLY = re.compile(r"^\s*#\s*ifdef\s+__CUDACC__\b.*?^\s*#\s*endif\b", re.M | re.S)


def sources(folder):
    return sorted(p for p in folder.rglob("*") if p.suffix in SOURCE_SUFFIXES and p.is_file())


def main():
    problems = []
    owner = {}  # header path relative to its component -> component
    for component in ALLOWED:
        for path in sources(ROOT / component):
            if path.suffix in {".h", ".cuh"}:
                rel = path.relative_to(ROOT / component).as_posix()
                if path.name in owner and owner[path.name] != component:
                    problems.append(f"{component}/{rel}: the header name {path.name} is also "
                                    f"{owner[path.name]}'s")
                owner.setdefault(path.name, component)
                owner[rel] = component

    for component, allowed in ALLOWED.items():
        for path in sources(ROOT / component):
            text = path.read_text(encoding="utf-8")
            where = path.relative_to(ROOT).as_posix()
            bad = FORBIDDEN_SYSTEM.get(component)
            for kind, name in INCLUDE.findall(CUDA_ONLY.sub("", text)):
                if kind == "<" and bad and bad.match(name):
                    problems.append(f"{where}: includes <{name}>, which {component} must not")
            for kind, name in INCLUDE.findall(text):
                if kind == "<":
                    continue
                if name.startswith("skipsoftmax/") or name in GENERATED:
                    continue
                local = (path.parent / name).resolve()
                if local.is_file():
                    try:
                        target = local.relative_to(ROOT).parts[0]
                    except ValueError:
                        target = None
                else:
                    target = owner.get(name)
                if target is None:
                    problems.append(f'{where}: "{name}" is no header of any component')
                elif target != component and target not in allowed:
                    problems.append(f'{where}: includes "{name}" of {target}, a layer {component} '
                                    f"may not depend on")

    for path in sources(ROOT / "include"):
        for kind, name in INCLUDE.findall(path.read_text(encoding="utf-8")):
            if kind == '"' and not name.startswith("skipsoftmax/"):
                problems.append(f'{path.relative_to(ROOT)}: a public header includes "{name}"')

    for p in problems:
        print(p)
    checked = sum(len(sources(ROOT / c)) for c in ALLOWED)
    print(f"layering: {checked} sources checked, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
