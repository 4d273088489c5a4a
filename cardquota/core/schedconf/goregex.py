"""Regular expressions as Go's regexp (RE2) reads them — the syntax of crossquota's ``gpu-resource-names`` — checked
and compiled with Python's re: Go-only spellings turned into Python's, what Go does not support refused."""

from __future__ import annotations

import re

from cardquota.core.violations import written

MAX_GO_REPEAT = 1000
"""Go's regexp rejects a repeat count above this (``a{1001}``)."""
_OCTAL = re.compile(r"[0-7]{1,3}")
_HEX = re.compile(r"[0-9A-Fa-f]{1,8}")
_REPEAT = re.compile(r"\{([0-9]+)(,([0-9]*))?\}")
_GO_FLAGS = re.compile(r"\(\?([imsU]*(?:-[imsU]+)?)([:)])")
_GO_CLASS_NAMES = frozenset(
    {"alnum", "alpha", "ascii", "blank", "cntrl", "digit", "graph", "lower", "print", "punct", "space", "upper",
     "word", "xdigit"})


def go_regex_problem(pattern: str) -> str | None:
    """What Go's ``regexp.Compile`` would reject in ``pattern``, or None.

    Python's ``re`` checks the syntax after Go-only spellings (``\\z``, ``\\pL``, ``\\x{..}``, ``\\Q..\\E``,
    ``(?<name>``, ``(?U)``, ``[[:alpha:]]``, flags mid-pattern) are turned into Python ones; what Go does not
    support although Python does (backreferences, lookaround, atomic groups, possessive repeats, conditionals,
    ``\\Z``, repeats above 1000) is refused first.
    """
    translated = _python_spelling(pattern)
    if not isinstance(translated, tuple):
        return translated
    text, changed = translated
    try:
        re.compile(text)
    except re.error as error:
        where = f" at position {error.pos}" if error.pos is not None and not changed else ""
        return f"{error.msg}{where}"
    except (ValueError, RecursionError, OverflowError, MemoryError) as failure:
        return f"{type(failure).__name__}: {failure}"
    return None


def compile_go_regex(pattern: str) -> re.Pattern[str] | None:
    """``pattern`` (Go syntax) compiled for Python's re, or None when Go would reject it."""
    if go_regex_problem(pattern) is not None:
        return None
    translated = _python_spelling(pattern)
    return re.compile(translated[0]) if isinstance(translated, tuple) else None


def _python_spelling(pattern: str) -> tuple[str, bool] | str:
    """(the pattern spelled for Python's re, whether anything changed), or what Go would not support."""
    out: list[str] = []
    i, n = 0, len(pattern)
    in_class = False
    class_start = 0  # index of the first character that may close the class
    while i < n:
        char = pattern[i]
        if char == "\\":
            step = _escape(pattern, i, in_class, out)
            if isinstance(step, str):
                return step
            i = step
            continue
        if in_class:
            if char == "]" and i >= class_start:
                in_class = False
                out.append(char)
            elif char == "[" and pattern.startswith("[:", i):
                end = pattern.find(":]", i + 2)
                if end >= 0:  # without ":]" further on, Go reads the "[" as a literal
                    if pattern[i + 2:end].removeprefix("^") not in _GO_CLASS_NAMES:
                        return f"invalid character class {written(pattern[i:end + 2])}"
                    out.append("a")
                    i = end + 2
                    continue
                out.append("\\[")
            elif char in "[&~|" or (char == "-" and pattern.startswith("--", i)):
                out.append("\\" + char)  # literal in Go; escaped so Python does not read a nested set
            else:
                out.append(char)
            i += 1
            continue
        if char == "[":
            in_class = True
            out.append(char)
            i += 1
            if pattern.startswith("^", i):
                out.append("^")
                i += 1
            class_start = i + 1  # a "]" right after "[" or "[^" is a literal
            continue
        if char == "(" and pattern.startswith("(?", i):
            step = _group(pattern, i, out)
            if isinstance(step, str):
                return step
            i = step
            continue
        if char in "*+?":
            if pattern.startswith("+", i + 1):
                return f"possessive repeat {pattern[i:i + 2]} is not supported by Go's regexp"
            out.append(char)
            i += 1
            continue
        if char == "{":
            repeat = _REPEAT.match(pattern, i)
            if repeat is not None:
                counts = [int(text) for text in (repeat[1], repeat[3]) if text]
                if any(count > MAX_GO_REPEAT for count in counts):
                    return f"repeat count {repeat[0]} is above Go's limit of {MAX_GO_REPEAT}"
                if pattern.startswith("+", repeat.end()):
                    return f"possessive repeat {repeat[0]}+ is not supported by Go's regexp"
                out.append(repeat[0])
                i = repeat.end()
                continue
        out.append(char)
        i += 1
    text = "".join(out)
    return text, text != pattern


def _escape(pattern: str, i: int, in_class: bool, out: list[str]) -> int | str:
    """Append the Python spelling of the escape at ``i``; the index after it, or what Go would reject."""
    if i + 1 >= len(pattern):
        return "trailing backslash at end of expression"
    code = pattern[i + 1]
    if code in "01234567":
        octal = _OCTAL.match(pattern, i + 1)
        assert octal is not None
        if code != "0" and len(octal[0]) == 1:
            return f"backreference \\{code} is not supported by Go's regexp"
        out.append(f"\\x{int(octal[0], 8):02x}")
        return octal.end()
    if code in "89":
        return f"backreference \\{code} is not supported by Go's regexp"
    if code == "Z":
        return "\\Z is not supported by Go's regexp (use \\z)"
    if code in "uUN":
        return f"invalid escape sequence \\{code} (Go's regexp writes code points as \\x{{...}})"
    if code == "z" and not in_class:
        out.append("\\Z")
        return i + 2
    if code in "pP":
        if pattern.startswith("{", i + 2):
            end = pattern.find("}", i + 3)
            if end < 0 or end == i + 3:
                return f"invalid character class range {written(pattern[i:i + 12])}"
            out.append("a")
            return end + 1
        if i + 2 >= len(pattern) or not pattern[i + 2].isalpha():
            return f"invalid character class range {written(pattern[i:i + 3])}"
        out.append("a")
        return i + 3
    if code == "x" and pattern.startswith("{", i + 2):
        end = pattern.find("}", i + 3)
        digits = pattern[i + 3:end] if end >= 0 else ""
        if _HEX.fullmatch(digits) is None or int(digits, 16) > 0x10FFFF:
            return f"invalid escape sequence {written(pattern[i:end + 1] if end >= 0 else pattern[i:i + 12])}"
        out.append(f"\\U{int(digits, 16):08x}")
        return end + 1
    if code == "Q" and not in_class:
        end = pattern.find("\\E", i + 2)
        literal = pattern[i + 2:] if end < 0 else pattern[i + 2:end]
        out.append(re.escape(literal))
        return len(pattern) if end < 0 else end + 2
    if code == "C":
        out.append("." if not in_class else "a")
        return i + 2
    out.append(pattern[i:i + 2])
    return i + 2


def _group(pattern: str, i: int, out: list[str]) -> int | str:
    """Append the Python spelling of the ``(?`` group at ``i``; the index after its opening, or a Go refusal."""
    rest = pattern[i + 2:]
    if rest.startswith(("=", "!", "<=", "<!")):
        return "lookahead and lookbehind assertions are not supported by Go's regexp"
    if rest.startswith("P="):
        return "backreferences are not supported by Go's regexp"
    if rest.startswith(">"):
        return "atomic groups (?>...) are not supported by Go's regexp"
    if rest.startswith("("):
        return "conditional groups are not supported by Go's regexp"
    if rest.startswith("#"):
        return "comments (?#...) are not supported by Go's regexp"
    if rest.startswith("P<"):
        out.append("(?P<")
        return i + 4
    if rest.startswith("<"):
        out.append("(?P<")
        return i + 3
    flags = _GO_FLAGS.match(pattern, i)
    if flags is None:
        return f"invalid or unsupported Perl syntax {written(pattern[i:i + 6])}"
    # Flags change what matches, never whether the pattern is valid: a plain group (or nothing) checks the rest.
    if flags[2] == ":":
        out.append("(?:")
    return flags.end()



