"""Write the references that are generated, never kept by hand; `--check` changes nothing and
exits 1 naming every file that is not what this would write.

- docs/reference/profile.md and the KEYS section of man/rrcli-profile.5: from
  rrcli/config/data/keys.toml (each key's type, default and meaning, written once) joined with the
  schema of rrcli/config/schema.py (the kind and choices a value is checked against). Every key
  of the schema must have its entry, and every entry must name a key of the schema.
- docs/reference/cli.md: each command's `--help`, as click prints it.
- the SYNOPSIS and OPTIONS sections of each command's page, man/rrcli.1 and man/rrcli-<cmd>.1:
  from click's own options (name, metavar, help and the default click shows), so `--help`, the man
  page and the site say the same. The rest of each page is written by hand.

    python docs/generate.py          # rewrite them
    python docs/generate.py --check  # CI: fails when one is stale
"""

from __future__ import annotations

import re
import sys
import textwrap
import tomllib
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from rrcli.cli import main  # noqa: E402
from rrcli.config import schema  # noqa: E402

KEYS = ROOT / "rrcli" / "config" / "data" / "keys.toml"
PROFILE_PAGE = ROOT / "man" / "rrcli-profile.5"
PROFILE_MD = ROOT / "docs" / "reference" / "profile.md"
CLI_MD = ROOT / "docs" / "reference" / "cli.md"
WIDTH = 100

#: each section of keys.toml and the schema tables whose keys it documents
SECTIONS = {
    "Top level": ("TOP",),
    "[defaults] and [[backends]]": ("BACKEND", "CREDENTIALS", "PRICE"),
    "sim = { ... }": ("SIM",),
    "[retry]": ("RETRY",),
    "[gate]": ("GATE",),
    "[cooldown]": ("COOLDOWN",),
    "[health]": ("HEALTH",),
    "[budget]": ("BUDGET",),
    "[cache]": ("CACHE",),
    "[serve]": ("SERVE",),
    "[queue]": ("QUEUE",),
}
#: the top-level keys that are tables: each has its own section (or, for backends, the entries)
TABLES = {"defaults", "retry", "gate", "cooldown", "health", "cache", "budget", "queue", "serve"}


class Stale(Exception):
    """keys.toml and the schema disagree."""


def load_keys() -> list[dict]:
    return tomllib.loads(KEYS.read_text(encoding="utf-8"))["section"]


def entry_names(entry: dict) -> list[str]:
    """The schema keys an entry documents: "credentials.token_env, ..." is token_env and more."""
    return [name.strip().rsplit(".", 1)[-1] for name in entry["key"].split(",")]


def field_of(title: str, name: str) -> schema.Field | None:
    for table in SECTIONS[title]:
        found = getattr(schema, table).get(name)
        if found is not None:
            return found
    return None


def check_coverage(sections: list[dict]) -> list[str]:
    """What keys.toml misses or has too many, against the schema; empty when they agree."""
    problems = []
    titles = [s["title"] for s in sections]
    if titles != list(SECTIONS):
        problems.append(f"sections are {titles}, expected {list(SECTIONS)}")
        return problems
    for section in sections:
        title = section["title"]
        text = " ".join(
            [section.get("intro", "")] + [f"{e['key']} {e['meaning']}" for e in section["keys"]]
        )
        named = {n for e in section["keys"] for n in entry_names(e)}
        for name in named:
            if field_of(title, name) is None:
                problems.append(f"{title}: {name} is no key of the schema")
        for table in SECTIONS[title]:
            for name in getattr(schema, table):
                if table == "TOP" and name in TABLES | {"backends"}:
                    continue
                if name not in named and not re.search(rf"\b{re.escape(name)}\b", text):
                    problems.append(f"{title}: the schema's {table}.{name} has no entry")
    return problems


# --- roff -------------------------------------------------------------------------------------


def roff(text: str) -> str:
    text = text.replace("\\", "\\e").replace("-", "\\-").replace('"', "\\(dq")
    text = text.replace("≥", "\\(>=").replace("×", "\\(mu")
    return re.sub(r"\*\*(.+?)\*\*", r"\\fB\1\\fR", text)


def roff_lines(text: str) -> list[str]:
    lines = textwrap.wrap(roff(text), WIDTH, break_long_words=False, break_on_hyphens=False)
    return [f"\\&{line}" if line[:1] in ".'" else line for line in lines]


def keys_section(sections: list[dict]) -> list[str]:
    out = [".SH KEYS"]
    for section in sections:
        out.append(f".SS {roff(section['title'])}")
        if section.get("intro"):
            out += roff_lines(section["intro"])
        for entry in section["keys"]:
            out += [".TP", f".B {roff(entry['key'])}"]
            out.append(
                f'.RI "(" "{roff(entry["type"])}" "; default " "{roff(entry["default"])}" ")"'
            )
            out += roff_lines(entry["meaning"])
    return out


def profile_page(sections: list[dict]) -> str:
    lines = PROFILE_PAGE.read_text(encoding="utf-8").split("\n")
    start, end = lines.index(".SH KEYS"), lines.index(".SH EXAMPLE")
    return "\n".join([*lines[:start], *keys_section(sections), *lines[end:]])


# --- markdown ---------------------------------------------------------------------------------


def md(text: str) -> str:
    text = text.replace("<", "&lt;")
    return re.sub(r"(?<!\*)\*(?!\*)", r"\\*", text)


def kind_text(field: schema.Field | None) -> str:
    if field is None:
        return ""
    shown = schema.EXPECTED[field.kind][0]
    if field.choices:
        shown += ": " + ", ".join(f"`{c}`" for c in field.choices)
    return shown


def profile_md(sections: list[dict]) -> str:
    out = [
        "# Profile keys",
        "",
        "<!-- generated by `python docs/generate.py` from rrcli/config/data/keys.toml and the",
        "     schema in rrcli/config/schema.py: edit those, never this page -->",
        "",
        "Every key a profile may hold: its type, its default and what it does. The same text is",
        "`man 5 rrcli-profile`. How the pieces fit together: [Profiles](../guides/profiles.md).",
    ]
    for section in sections:
        out += ["", f"## {section['title']}", ""]
        if section.get("intro"):
            out += [md(section["intro"]), ""]
        for entry in section["keys"]:
            kinds = sorted(
                {kind_text(field_of(section["title"], n)) for n in entry_names(entry)} - {""}
            )
            out += [f"### `{entry['key']}`", ""]
            out.append(f"*{md(entry['type'])}*; default: {md(entry['default'])}  ")
            out.append(f"Checked as {'; '.join(kinds)}." if kinds else "A table.")
            out += ["", md(entry["meaning"]), ""]
    return "\n".join(out).rstrip() + "\n"


# --- the CLI ----------------------------------------------------------------------------------


def every_command(group: click.Group, prefix: tuple[str, ...] = ()):
    yield prefix, group
    for name in sorted(group.commands):
        command = group.commands[name]
        if isinstance(command, click.Group):
            yield from every_command(command, (*prefix, name))
        elif not command.hidden:
            yield (*prefix, name), command


def help_text(args: tuple[str, ...], command: click.Command) -> str:
    """The command's `--help` as `rrcli ARGS --help` prints it (the group's settings inherited)."""
    ctx = click.Context(
        main,
        info_name="rrcli",
        terminal_width=WIDTH,
        max_content_width=WIDTH,
        **main.context_settings,
    )
    group = main
    for name in args:
        group = group.commands[name]
        ctx = click.Context(group, info_name=name, parent=ctx)
    return command.get_help(ctx)


def cli_md() -> str:
    out = [
        "# Command line",
        "",
        "<!-- generated by `python docs/generate.py` from click's commands: edit rrcli/cli.py -->",
        "",
        "Each command's `--help`, as it prints it. The man pages (`man rrcli-run`, ...) say more.",
    ]
    for args, command in every_command(main):
        out += ["", f"## {' '.join(('rrcli', *args))}", "", "```text", help_text(args, command)]
        out += ["```"]
    return "\n".join(out) + "\n"


# --- the command pages -------------------------------------------------------------------------

MAN = ROOT / "man"
GENERATED = ".\\\" generated by docs/generate.py from click's options: edit rrcli/cli.py"


def command_context(args: tuple[str, ...]) -> tuple[click.Command, click.Context]:
    ctx = click.Context(main, info_name="rrcli", **main.context_settings)
    command: click.Command = main
    for name in args:
        command = command.commands[name]
        ctx = click.Context(command, info_name=name, parent=ctx)
    return command, ctx


def option_names(param: click.Option) -> str:
    """`-h, --help` in bold, a flag's off switch after a slash."""
    opts = sorted(param.opts, key=lambda o: o.startswith("--"))  # as click's help: short first
    names = ", ".join(f"\\fB{roff(o)}\\fR" for o in opts)
    if param.secondary_opts:
        names += " / " + ", ".join(f"\\fB{roff(o)}\\fR" for o in param.secondary_opts)
    return names


def option_metavar(param: click.Option, ctx: click.Context) -> str:
    if param.is_flag or param.count:
        return ""
    return roff(param.make_metavar(ctx))


def synopsis_section(args: tuple[str, ...]) -> list[str]:
    """As click's usage line: the options, then the arguments (brackets roman, names italic)."""
    command, ctx = command_context(args)
    out = [".SH SYNOPSIS", GENERATED, f".B {roff(' '.join(('rrcli', *args)))}"]
    params = command.get_params(ctx)
    for param in params:
        if isinstance(param, click.Option) and "--help" not in param.opts:
            metavar = option_metavar(param, ctx)
            first = roff((param.opts + param.secondary_opts)[0])
            out.append(f"[\\fB{first}\\fR" + (f" \\fI{metavar}\\fR]" if metavar else "]"))
    for param in params:
        if isinstance(param, click.Argument):
            metavar = roff(param.make_metavar(ctx))
            inner = metavar.strip("[]")
            shown = f"\\fI{inner.removesuffix('...')}\\fR" + (
                "..." if inner.endswith("...") else ""
            )
            out.append(f"[{shown}]" if metavar.startswith("[") else shown)
    if isinstance(command, click.Group):
        out.append("\\fICOMMAND\\fR [\\fIARGS\\fR...]")
    return out


def options_section(args: tuple[str, ...]) -> list[str]:
    command, ctx = command_context(args)
    out = [".SH OPTIONS", GENERATED]
    for param in command.get_params(ctx):
        record = param.get_help_record(ctx) if isinstance(param, click.Option) else None
        if record is None:
            continue
        metavar = option_metavar(param, ctx)
        out += [".TP", option_names(param) + (f" \\fI{metavar}\\fR" if metavar else "")]
        out += roff_lines(record[1])
    return out


def replace_section(lines: list[str], section: list[str]) -> list[str]:
    """LINES with the section titled like SECTION's first line replaced, up to the next .SH."""
    start = lines.index(section[0])
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith(".SH "))
    return [*lines[:start], *section, *lines[end:]]


def command_pages() -> dict[Path, str]:
    pages = {}
    for page in sorted(MAN.glob("rrcli*.1")):
        name = page.stem.removeprefix("rrcli").removeprefix("-")
        args = (name,) if name else ()
        lines = page.read_text(encoding="utf-8").split("\n")
        lines = replace_section(lines, synopsis_section(args))
        lines = replace_section(lines, options_section(args))
        pages[page] = "\n".join(lines)
    return pages


def outputs() -> dict[Path, str]:
    sections = load_keys()
    problems = check_coverage(sections)
    if problems:
        raise Stale("; ".join(problems))
    return {
        PROFILE_PAGE: profile_page(sections),
        PROFILE_MD: profile_md(sections),
        CLI_MD: cli_md(),
        **command_pages(),
    }


def main_(argv: list[str]) -> int:
    try:
        wanted = outputs()
    except Stale as exc:
        print(f"generate.py: keys.toml and the schema disagree: {exc}", file=sys.stderr)
        return 1
    stale = [p for p, text in wanted.items() if not p.exists() or p.read_text("utf-8") != text]
    if "--check" in argv:
        for path in stale:
            print(
                f"{path.relative_to(ROOT)} is stale: run python docs/generate.py", file=sys.stderr
            )
        return 1 if stale else 0
    for path in stale:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(wanted[path], encoding="utf-8")
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main_(sys.argv[1:]))
