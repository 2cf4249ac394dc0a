"""Every relative link and every file path named in the Markdown documents resolves.

Links: ``[text](target)`` that are not URLs, resolved against the document's folder.
File references: code spans that look like a path (``src/signoff/cli.py``,
``store/tasks.py::_guard``, ``tests/node/``), resolved against the document's folder, the
repository root or the package (``src/signoff``), as a reader would look for them.
"""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SKIP_DIRS = {".venv", "node_modules", ".git", ".pytest_cache", ".mypy_cache", ".ruff_cache"}
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)|!\[[^\]]*\]\(([^)\s]+)\)")
CODE_SPAN = re.compile(r"`([^`\n]+)`")
PATH_LIKE = re.compile(
    r"^(?:\.{1,2}/)?[\w.-]+(?:/[\w.-]+)*"
    r"(?:\.(?:py|md|json|toml|html|mjs|js|css|txt|ya?ml|png|mako|ini|cfg)(?:::[\w.]+)?|/)$"
)
FENCE = re.compile(r"^(```|~~~)")


def documents() -> list[Path]:
    return sorted(
        path
        for path in ROOT.rglob("*.md")
        if not SKIP_DIRS.intersection(path.relative_to(ROOT).parts)
    )


def prose(text: str) -> str:
    """The document without its fenced code blocks (commands, not references)."""
    kept, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line.strip()):
            fenced = not fenced
            continue
        if not fenced:
            kept.append(line)
    return "\n".join(kept)


def generated(target: str) -> bool:
    """A file some command writes (ignored by git, or in a folder that is), such as an
    example's output."""
    patterns = [
        line.strip().rstrip("/")
        for line in (ROOT / ".gitignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    parts = Path(target).parts  # a file in an ignored folder is generated too
    return any(
        fnmatch.fnmatch(target, p) or any(fnmatch.fnmatch(part, p) for part in parts)
        for p in patterns
    )


def resolves(reference: str, document: Path) -> bool:
    target = reference.split("::", 1)[0].split("#", 1)[0]
    if not target or generated(target):
        return True
    bases = [document.parent, ROOT, ROOT / "src" / "signoff"]
    return any((base / target).exists() for base in bases)


def file_references(text: str) -> list[str]:
    found = []
    for span in CODE_SPAN.findall(prose(text)):
        candidate = span.strip()
        if "/" not in candidate or "://" in candidate or " " in candidate:
            continue
        if any(ch in candidate for ch in "{}<>*$…"):
            continue  # a pattern or a placeholder, not a file
        if PATH_LIKE.match(candidate):
            found.append(candidate)
    return found


@pytest.mark.parametrize("document", documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_links_and_file_references_resolve(document: Path) -> None:
    text = document.read_text(encoding="utf-8")
    broken = []
    for match in LINK.finditer(prose(text)):
        target = match.group(1) or match.group(2)
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # a URL or an anchor in the same page
        if not resolves(target, document):
            broken.append(f"link {target}")
    broken += [f"file `{ref}`" for ref in file_references(text) if not resolves(ref, document)]
    assert not broken, f"{document.relative_to(ROOT)} refers to what does not exist: {broken}"


def test_the_checker_sees_documents() -> None:
    names = {path.relative_to(ROOT).as_posix() for path in documents()}
    assert {"README.md", "docs/api.md", "docs/design.md"} <= names


def test_the_readme_layout_names_what_is_there() -> None:
    """Each name in the README's layout block exists where the block puts it: indented
    entries under the folder above them, the others at the root."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = readme.split("## Layout", 1)[1].split("```", 2)[1]
    missing, parent = [], ROOT
    for line in block.splitlines():
        names = [
            word.strip("`;,")
            for word in line.split()
            if re.fullmatch(r"`?[\w.{},/-]+(/|\.\w+)`?[;,]?", word)
        ]
        if not names:
            continue
        if line.startswith("  "):
            paths = [parent / name for name in names]
        else:
            # "folder/  file.py ..." at the root: the files on the line are in the folder.
            first = ROOT / names[0]
            paths = [first, *(first / name for name in names[1:])]
            if names[0].endswith("/"):
                parent = first
        for path in paths:
            for expanded in _braces(str(path)):
                if not Path(expanded).exists():
                    missing.append(str(Path(expanded).relative_to(ROOT)))
    assert not missing, f"README's layout block names what does not exist: {missing}"


def _braces(name: str) -> list[str]:
    match = re.search(r"\{([^}]*)\}", name)
    if not match:
        return [name]
    return [
        name[: match.start()] + part + name[match.end() :] for part in match.group(1).split(",")
    ]


def test_documents_speak_the_products_language() -> None:
    """Rules are stated as rules: no "seed 003", "the seed's schema" (a user has no seeds).
    Tools' own flags such as schemathesis' ``--seed`` are fine."""
    jargon = re.compile(r"(?<!-)\bseed(?:'s|s)?\b(?!`)", re.IGNORECASE)
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in documents()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if jargon.search(line.replace("--seed", ""))
    ]
    assert not found, "state the rule itself instead of citing its origin:\n" + "\n".join(found)


def _code_files() -> list[Path]:
    suffixes = {".py", ".html", ".js", ".css", ".lua", ".sql", ".toml", ".md"}
    roots = [ROOT / name for name in ("src", "tests", "examples", "bench", "scripts")]
    return [
        path
        for root in roots
        for path in sorted(root.rglob("*"))
        if path.suffix in suffixes and "node_modules" not in path.parts and path.is_file()
    ]


def test_code_and_comments_speak_the_products_language() -> None:
    """Code, comments and test names state the rule itself, never where it came from: no
    origin documents ("seed 003") and no tracker numbers ("issue 9") — a reader has
    neither. Random seeds (``--seed``, ``randomseed``) are fine."""
    jargon = re.compile(
        r"(?<![-\w])seed(?:'s|s|-era)?\b(?!`)|\bissues? #?\d+\b|\(#\d+\)", re.IGNORECASE
    )
    this_test = Path(__file__).resolve()
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in _code_files()
        if path.resolve() != this_test
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if jargon.search(line.replace("--seed", "").replace("randomseed", ""))
    ]
    assert not found, "state the rule itself instead of citing its origin:\n" + "\n".join(found)
