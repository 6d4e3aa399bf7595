"""docs/guides/layout.md stays true: every package folder has its line, and every module in it is named there."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("redkit", "redkit_experiments")


def layout_lines() -> dict[str, str]:
    """{folder: the text of its line and continuation lines} from the page's code block."""
    block = (ROOT / "docs/guides/layout.md").read_text().split("```")[1]
    lines, current = {}, None
    for line in block.splitlines():
        head = line.split(" ", 1)[0]
        if head.endswith("/") and head.split("/")[0] in PACKAGES:
            current = head.rstrip("/")
            lines[current] = line[len(head) :]
        elif current and line.strip():
            lines[current] += " " + line.strip()
    return lines


def package_folders() -> dict[str, set[str]]:
    """{folder: module names} for every package folder of the two packages."""
    folders = {}
    for package in PACKAGES:
        for init in (ROOT / package).rglob("__init__.py"):
            folder = init.parent
            names = {p.stem for p in folder.glob("*.py") if p.stem != "__init__"}
            names |= {p.name for p in folder.iterdir() if (p / "__init__.py").exists()}  # sub-packages
            folders[folder.relative_to(ROOT).as_posix()] = names
    return folders


def test_every_package_folder_has_its_line_and_no_line_names_a_missing_folder():
    assert set(layout_lines()) == set(package_folders())


def test_every_module_is_named_on_its_folders_line():
    lines = layout_lines()
    for folder, names in package_folders().items():
        words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", lines.get(folder, "")))
        missing = sorted(n for n in names if n not in words and f"{folder}/{n}" not in lines)
        assert not missing, f"docs/guides/layout.md: {folder}/ does not name {missing}"
