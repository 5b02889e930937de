"""Read a launch script as bash would, without running anything.

``run_script(text, environ=..., args=...)`` parses the script with bash's own quoting rules and
interprets it: variables and ``export``, arrays (``A=(...)``, ``A+=(...)``, ``"${A[@]}"`` one word
per element, unquoted ``${A[@]}`` word-split on IFS), parameter expansion (``${X:-default}`` with
quoted defaults, ``${X:=...}``, ``${X:+...}``, ``${#X}``, ``${X#pat}``, ``${X%pat}``,
``${X//pat/rep}``, ``${X:off:len}``, ``${X^^}``, ``${!X}``), ``$((...))`` with bash's 64-bit
arithmetic, ``printf -v``, ``read`` from here-strings, ``if``/``case``/``for``/``while``/``[ ]``/
``[[ ]]``, functions, ``eval``, ``bash -c STRING`` and here-documents fed to ``sbatch``/``bash``
(both read as the scripts they are). What it returns is every command the script would start
(words, environment, line), which planner's readers pick the launcher line from.

Nothing is ever executed: command substitutions ``$(...)`` and backticks become unknown values
(listed in ``not_run``), except those made of bash's own builtins only (assignments and
``echo``/``printf`` of expansions, e.g. ``$(IFS=,; echo "${A[*]}")``, which are evaluated in a
subshell of the reader), files are never looked at (``[ -f X ]`` is undecidable, ``source`` is not
followed, unquoted globs stay literal as bash leaves them when no file matches).

Inputs and unknowns:

- a variable the script never sets (nor ``environ`` gives) is an input from the environment: where
  its value is used it stays a named placeholder (``$MASTER_ADDR``) so the argument list keeps its
  shape, and it is listed in ``unresolved``; where the script only asks whether it is set or empty
  (``${X:-d}``, ``[ -z "$X" ]``, conditions in general) it is unset, as bash sees it in an empty
  environment. A variable the script sets on some other path is empty, as bash leaves it.
- a condition that depends on an unknown value (a command substitution, a file test, ``=~``) is
  not guessed: the whole ``if``/``case``/loop is skipped and a note says so. Other commands are
  assumed to succeed (``mkdir -p X || exit 1`` does not exit).

Bounded on every input: the text, every value and array, the number of steps, loop iterations,
nesting (parser, expansions, arithmetic, function calls, ``eval``) and pattern-matching work all
have limits; past one the reader stops with a one-paragraph PlannerError. No regular expression
is applied to the input and no recursion is unbounded. Arithmetic follows bash: 64-bit wrap-around,
``**`` by squaring (so ``$((9**9**9))`` is instant), shifts by the count modulo 64, division by zero
and a negative exponent are errors that stop the script (as bash stops it).
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from planner.errors import PlannerError

MAX_SCRIPT_CHARS = 1 << 20
MAX_VALUE_CHARS = 1 << 20
MAX_ITEMS = 100_000
MAX_STEPS = 200_000
MAX_WORK = 2_000_000
MAX_DEPTH = 100
MAX_LOOP = 10_000
MAX_PRINTF_WIDTH = 10_000
SUBSTITUTION_STEPS = 10
"""Steps a builtin-only command substitution counts for (it parses and runs a subshell)."""

_PH = "\x00"  # placeholders: "\x00<n>\x00", atomic through re-parsing (eval, bash -c, heredocs)
_BLANK = " \t"
_META = " \t\n;&|<>()"
_WORD_SPECIAL = " \t\n;&|<>()\\'\"$`\x00"
_NAME_START = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_"
_NAME_CHARS = _NAME_START + "0123456789"
_DIGITS = "0123456789"
_SPECIAL_PARAMS = "@*#?$!-"
_SHELLS = ("bash", "sh", "dash", "zsh", "ksh")
_RESERVED_STOP = ("then", "elif", "else", "fi", "do", "done", "esac", "}")


# ---------------------------------------------------------------------------------------------
# results
# ---------------------------------------------------------------------------------------------


@dataclass
class Command:
    """One command the script would start (not a shell builtin)."""

    argv: list[str]
    """Words after expansion; unknown parts shown as written ($MASTER_ADDR, $(hostname))."""
    unknown: list[bool]
    """Whether each word holds something planner could not resolve."""
    env: dict[str, str]
    """Exported variables in force, plus this command's own VAR=x prefixes."""
    line: int
    where: str = ""
    """Empty at the top level, else how it is reached ('bash -c at line 85')."""


@dataclass
class ShellRun:
    commands: list[Command]
    unresolved: list[str]
    """Variables the script uses but never sets ($MASTER_ADDR, $1), first use first."""
    not_run: list[str]
    """Command substitutions, never executed."""
    notes: list[str]
    """Decisions planner could not take, and where it read more leniently than bash."""
    exit: tuple[int, int] | None = None
    """(line, status) of the exit that ended the script, if one did."""
    stopped: PlannerError | None = None
    """Where bash itself would stop (a syntax error, a failed arithmetic expansion), if it does."""


def _err(msg: str, hint: str | None = None) -> PlannerError:
    return PlannerError(msg, hint=hint)


class ScriptStop(PlannerError):
    """Where bash itself would stop the script: a syntax error, a failed arithmetic expansion."""


# ---------------------------------------------------------------------------------------------
# syntax tree
# ---------------------------------------------------------------------------------------------
# A word is a list of parts: ("lit", s) unquoted text; ("q", s) quoted text; ("dq", parts);
# ("param", Param); ("cmd", text) command substitution; ("arith", Word); ("ph", s) a placeholder;
# ("array", [Word]) the body of NAME=( ... ); ("paren", s) a '(...)' bash would reject.


@dataclass
class Word:
    parts: list
    start: int = 0
    end: int = 0


@dataclass
class Param:
    name: str
    index: Word | str | None = None  # "@", "*" or a subscript word
    op: str | None = None
    arg: Word | None = None
    arg2: Word | None = None
    text: str = ""
    length: bool = False
    indirect: bool = False


@dataclass
class Node:
    line: int
    src: tuple[int, int]


@dataclass
class Simple(Node):
    assigns: list  # (name, index Word | None, append, value Word)
    words: list[Word]
    redirs: list  # (op, Word | None, heredoc dict | None)


@dataclass
class Pipe(Node):
    cmds: list
    negate: bool


@dataclass
class AndOr(Node):
    items: list  # (op | None, node)


@dataclass
class Seq(Node):
    items: list
    snippet: str = field(default="", compare=False, repr=False)
    """The condition's source, for messages (set on if/while conditions)."""


@dataclass
class If(Node):
    clauses: list  # (cond Seq, body Seq)
    else_: Seq | None


@dataclass
class For(Node):
    var: str
    words: list[Word] | None


@dataclass
class ForBody(For):
    body: Seq


@dataclass
class CFor(Node):
    init: Word
    cond: Word
    step: Word
    body: Seq


@dataclass
class While(Node):
    cond: Seq
    body: Seq
    until: bool


@dataclass
class Case(Node):
    word: Word
    items: list  # (patterns [Word], body Seq, terminator)


@dataclass
class Group(Node):
    body: Seq
    subshell: bool
    redirs: list


@dataclass
class ArithCmd(Node):
    expr: Word


@dataclass
class CondCmd(Node):
    tokens: list  # ("op", s) | ("word", Word) | ("regex", s)


@dataclass
class FuncDef(Node):
    name: str
    body: Node


# ---------------------------------------------------------------------------------------------
# shared state of one reading: limits, placeholders, what was found
# ---------------------------------------------------------------------------------------------


class _State:
    def __init__(self):
        self.steps = 0
        self.work = 0
        self.depth = 0
        self.table: list[tuple[str, str]] = []  # placeholder n -> (kind, display); kind unset|opaque
        self.index: dict[tuple[str, str], int] = {}
        self.commands: list[Command] = []
        self.unresolved: dict[str, None] = {}
        self.not_run: dict[str, None] = {}
        self.notes: dict[str, None] = {}

    def step(self, n: int = 1) -> None:
        self.steps += n
        if self.steps > MAX_STEPS:
            raise _err(f"The script needs more than {MAX_STEPS:,} steps to read (a loop that does not end, or "
                       "one built to be slow); planner stops reading it.",
                       "Check the script's loops, or give the Megatron arguments as a plain list.")

    def spend(self, n: int) -> None:
        self.work += n
        if self.work > MAX_WORK:
            raise _err("The script's pattern matching needs more work than planner allows (a pattern built "
                       "to be slow?); planner stops reading it.")

    def enter(self, what: str = "nesting") -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise _err(f"The script nests deeper than {MAX_DEPTH} levels ({what}); planner stops reading it.")

    def leave(self) -> None:
        self.depth -= 1

    def ph(self, kind: str, display: str) -> str:
        key = (kind, display)
        n = self.index.get(key)
        if n is None:
            n = len(self.table)
            self.table.append(key)
            self.index[key] = n
        return f"{_PH}{n}{_PH}"

    def note(self, text: str) -> None:
        self.notes[text] = None

    # placeholder text helpers (linear scans) ----------------------------------------------
    def _spans(self, text: str):
        i = text.find(_PH)
        while i >= 0:
            j = text.find(_PH, i + 1)
            if j < 0:
                return
            yield i, j + 1, self.table[int(text[i + 1:j])]
            i = text.find(_PH, j + 1)

    def render(self, text: str) -> str:
        if _PH not in text:
            return text
        out, last = [], 0
        for a, b, (_, disp) in self._spans(text):
            out.append(text[last:a])
            out.append(disp)
            last = b
        out.append(text[last:])
        return "".join(out)

    def opaque(self, text: str) -> bool:
        return any(kind == "opaque" for _, _, (kind, _) in self._spans(text)) if _PH in text else False

    def strip_unset(self, text: str) -> str:
        """The text as bash has it: unset-variable placeholders are empty (opaque ones stay)."""
        if _PH not in text:
            return text
        out, last = [], 0
        for a, b, (kind, _) in self._spans(text):
            if kind == "unset":
                out.append(text[last:a])
                last = b
        out.append(text[last:])
        return "".join(out)


def _check_len(text: str) -> str:
    if len(text) > MAX_VALUE_CHARS:
        raise _err(f"A value in the script grows beyond {MAX_VALUE_CHARS:,} characters; planner stops reading it.")
    return text


# ---------------------------------------------------------------------------------------------
# parser
# ---------------------------------------------------------------------------------------------


class _Parser:
    def __init__(self, text: str, state: _State, line0: int = 0):
        self.s = text
        self.n = len(text)
        self.i = 0
        self.st = state
        self.nl = []
        k = text.find("\n")
        while k >= 0:
            self.nl.append(k)
            k = text.find("\n", k + 1)
        self.line0 = line0
        self.pending: list[dict] = []
        self.assigned: set[str] = set()

    # positions ------------------------------------------------------------------------------
    def line(self, pos: int | None = None) -> int:
        return self.line0 + bisect.bisect_left(self.nl, self.i if pos is None else pos) + 1

    def syntax(self, what: str, pos: int | None = None) -> PlannerError:
        return ScriptStop(f"Line {self.line(pos)} of the script: {what} (bash stops here with a syntax error).",
                          hint="Fix the script, or give the Megatron arguments as a plain list.")

    def peek(self, k: int = 0) -> str:
        j = self.i + k
        return self.s[j] if j < self.n else ""

    def starts(self, text: str) -> bool:
        return self.s.startswith(text, self.i)

    def skip_blanks(self) -> None:
        s, n = self.s, self.n
        while self.i < n:
            c = s[self.i]
            if c in _BLANK:
                self.i += 1
            elif c == "\\" and self.i + 1 < n and s[self.i + 1] == "\n":
                self.i += 2
            elif c == "#":
                j = s.find("\n", self.i)
                self.i = n if j < 0 else j
            else:
                return

    def newline(self) -> None:
        """Consume one newline, then the bodies of the here-documents it ends."""
        self.i += 1
        pending, self.pending = self.pending, []
        for doc in pending:
            self._heredoc_body(doc)

    def skip_space_nl(self) -> None:
        while True:
            self.skip_blanks()
            if self.peek() == "\n":
                self.newline()
            else:
                return

    def at_word(self, *words: str) -> str | None:
        for w in words:
            if self.s.startswith(w, self.i):
                j = self.i + len(w)
                if j >= self.n or self.s[j] in _META or (w in ("{", "}", "!", "[[", "]]") and self.s[j] in _BLANK + "\n"):
                    return w
        return None

    # lists ----------------------------------------------------------------------------------
    def parse_program(self) -> Seq:
        seq = self.parse_list(())
        self.skip_space_nl()
        if self.i < self.n:
            raise self.syntax(f"unexpected '{self.s[self.i]}'")
        return seq

    def next_command(self):
        """The next complete top-level command (bash reads and runs them one at a time), or None."""
        self.skip_space_nl()
        if self.i >= self.n:
            return None
        if self.at_word(*_RESERVED_STOP):
            raise self.syntax(f"unexpected '{self.at_word(*_RESERVED_STOP)}'")
        node = self.parse_andor()
        self.skip_blanks()
        c = self.peek()
        if c == ";" and not (self.starts(";;") or self.starts(";&")):
            self.i += 1
        elif c == "&" and not self.starts("&&"):
            self.i += 1
        elif c == "\n":
            self.newline()
        elif c:
            raise self.syntax(f"unexpected '{c}'")
        return node

    def parse_list(self, stop: tuple[str, ...], close_paren: bool = False, case_item: bool = False) -> Seq:
        start, line = self.i, self.line()
        items = []
        while True:
            self.skip_space_nl()
            if self.i >= self.n or self.at_word(*stop) or self.at_word(*_RESERVED_STOP) and stop:
                break
            if self.peek() == ")" and (close_paren or case_item):
                break
            if case_item and (self.starts(";;") or self.starts(";&")):
                break
            if self.at_word(*_RESERVED_STOP):
                raise self.syntax(f"unexpected '{self.at_word(*_RESERVED_STOP)}'")
            items.append(self.parse_andor())
            self.skip_blanks()
            c = self.peek()
            if c == ";" and not (self.starts(";;") or self.starts(";&")):
                self.i += 1
            elif c == "&" and not (self.starts("&&") or self.starts("&>")):
                self.i += 1
            elif c == "\n":
                self.newline()
            else:
                break
        return Seq(line, (start, self.i), items)

    def parse_andor(self):
        start, line = self.i, self.line()
        items: list[tuple[str | None, Node]] = [(None, self.parse_pipeline())]
        while True:
            self.skip_blanks()
            if self.starts("&&") or self.starts("||"):
                op = self.s[self.i:self.i + 2]
                self.i += 2
                self.skip_space_nl()
                items.append((op, self.parse_pipeline()))
            else:
                break
        return items[0][1] if len(items) == 1 else AndOr(line, (start, self.i), items)

    def parse_pipeline(self):
        self.skip_blanks()
        start, line = self.i, self.line()
        negate = False
        while self.at_word("!", "time"):
            negate ^= self.at_word("!") == "!"
            self.i += 1 if self.peek() == "!" else 4
            self.skip_blanks()
        cmds = [self.parse_command()]
        while True:
            self.skip_blanks()
            if self.peek() == "|" and not self.starts("||"):
                self.i += 2 if self.starts("|&") else 1
                self.skip_space_nl()
                cmds.append(self.parse_command())
            else:
                break
        if len(cmds) == 1 and not negate:
            return cmds[0]
        return Pipe(line, (start, self.i), cmds, negate)

    # commands -------------------------------------------------------------------------------
    def parse_command(self):
        self.st.enter("compound commands")
        try:
            self.skip_blanks()
            start, line = self.i, self.line()
            kw = self.at_word("if", "for", "select", "while", "until", "case", "function", "{", "[[")
            if kw == "if":
                node: Node = self.parse_if(start, line)
            elif kw in ("for", "select"):
                node = self.parse_for(start, line, kw)
            elif kw in ("while", "until"):
                node = self.parse_while(start, line, kw)
            elif kw == "case":
                node = self.parse_case(start, line)
            elif kw == "function":
                self.i += len(kw)
                self.skip_blanks()
                name = self.read_word()
                if name is None:
                    raise self.syntax("a function needs a name")
                self.skip_blanks()
                if self.starts("()"):
                    self.i += 2
                self.skip_space_nl()
                return FuncDef(line, (start, self.i), _literal(name), self.parse_command())
            elif kw == "{":
                self.i += 1
                body = self.parse_list(("}",))
                if not self.at_word("}"):
                    raise self.syntax("'{' is never closed with '}'", start)
                self.i += 1
                node = Group(line, (start, self.i), body, False, self.parse_redirs())
            elif kw == "[[":
                node = self.parse_cond(start, line)
            elif self.starts("(("):
                end = self._match_double_paren(self.i + 2)
                expr = self._sub_word(self.i + 2, end)
                self.i = end + 2
                node = ArithCmd(line, (start, self.i), expr)
            elif self.peek() == "(":
                self.i += 1
                body = self.parse_list((), close_paren=True)
                if self.peek() != ")":
                    raise self.syntax("'(' is never closed with ')'", start)
                self.i += 1
                node = Group(line, (start, self.i), body, True, self.parse_redirs())
            else:
                return self.parse_simple(start, line)
            return node
        finally:
            self.st.leave()

    def parse_redirs(self) -> list:
        out: list = []
        while True:
            self.skip_blanks()
            r = self.try_redir()
            if r is None:
                return out
            out.append(r)

    def expect(self, word: str, opened: int) -> None:
        self.skip_space_nl()
        if not self.at_word(word):
            raise self.syntax(f"expected '{word}'", opened)
        self.i += len(word)

    def parse_if(self, start, line) -> If:
        self.i += 2
        clauses, else_ = [], None
        while True:
            c0 = self.i
            cond = self.parse_list(("then",))
            cond.snippet = _snip(self.s[c0:self.i])
            self.expect("then", start)
            body = self.parse_list(("elif", "else", "fi"))
            clauses.append((cond, body))
            self.skip_space_nl()
            if self.at_word("elif"):
                self.i += 4
                continue
            if self.at_word("else"):
                self.i += 4
                else_ = self.parse_list(("fi",))
            self.expect("fi", start)
            return If(line, (start, self.i), clauses, else_)

    def _do_body(self, start) -> Seq:
        self.skip_space_nl()
        if self.peek() == ";":
            self.i += 1
        self.expect("do", start)
        body = self.parse_list(("done",))
        self.expect("done", start)
        return body

    def parse_for(self, start, line, kw) -> Node:
        self.i += len(kw)
        self.skip_blanks()
        if kw == "for" and self.starts("(("):
            end = self._match_double_paren(self.i + 2)
            inner_start = self.i + 2
            parts, depth, k0 = [], 0, inner_start
            for k in range(inner_start, end):
                c = self.s[k]
                depth += (c == "(") - (c == ")")
                if c == ";" and depth == 0:
                    parts.append((k0, k))
                    k0 = k + 1
            parts.append((k0, end))
            if len(parts) != 3:
                raise self.syntax("'for ((' needs three expressions separated by ';'", start)
            self.i = end + 2
            init, cond, step = (self._sub_word(a, b) for a, b in parts)
            self.skip_blanks()
            return CFor(line, (start, self.i), init, cond, step, self._do_body(start))
        name = self.read_word()
        if name is None:
            raise self.syntax("'for' needs a variable name", start)
        var = _literal(name)
        self.assigned.add(var)
        self.skip_space_nl()
        words = None
        if self.at_word("in"):
            self.i += 2
            words = []
            while True:
                self.skip_blanks()
                if self.peek() in (";", "\n", ""):
                    break
                w = self.read_word()
                if w is None:
                    break
                words.append(w)
        node = ForBody(line, (start, self.i), var, words, Seq(line, (start, start), []))
        node.body = self._do_body(start)
        if kw == "select":
            node.var = "\x00select"
        return node

    def parse_while(self, start, line, kw) -> While:
        self.i += len(kw)
        c0 = self.i
        cond = self.parse_list(("do",))
        cond.snippet = _snip(self.s[c0:self.i])
        self.expect("do", start)
        body = self.parse_list(("done",))
        self.expect("done", start)
        return While(line, (start, self.i), cond, body, kw == "until")

    def parse_case(self, start, line) -> Case:
        self.i += 4
        self.skip_blanks()
        word = self.read_word()
        if word is None:
            raise self.syntax("'case' needs a word", start)
        self.skip_space_nl()
        if not self.at_word("in"):
            raise self.syntax("expected 'in' after 'case WORD'", start)
        self.i += 2
        items: list = []
        while True:
            self.skip_space_nl()
            if self.at_word("esac"):
                self.i += 4
                return Case(line, (start, self.i), word, items)
            if self.i >= self.n:
                raise self.syntax("'case' is never closed with 'esac'", start)
            if self.peek() == "(":
                self.i += 1
            pats = []
            while True:
                self.skip_blanks()
                w = self.read_word()
                if w is None:
                    raise self.syntax("a case pattern is missing", start)
                pats.append(w)
                self.skip_blanks()
                if self.peek() == "|":
                    self.i += 1
                    continue
                if self.peek() == ")":
                    self.i += 1
                    break
                raise self.syntax("expected ')' after a case pattern", start)
            body = self.parse_list(("esac",), case_item=True)
            term = ";;"
            for t in (";;&", ";;", ";&"):
                if self.starts(t):
                    self.i += len(t)
                    term = t
                    break
            items.append((pats, body, term))

    def parse_cond(self, start, line) -> CondCmd:
        self.i += 2
        tokens: list = []
        while True:
            self.skip_blanks()
            if self.peek() == "\n":
                self.newline()
                continue
            if self.i >= self.n:
                raise self.syntax("'[[' is never closed with ']]'", start)
            if self.at_word("]]"):
                self.i += 2
                return CondCmd(line, (start, self.i), tokens)
            for op in ("&&", "||", "(", ")", "<", ">"):
                if self.starts(op):
                    tokens.append(("op", op))
                    self.i += len(op)
                    break
            else:
                if tokens and tokens[-1] == ("word", "=~"):
                    k, depth = self.i, 0
                    while k < self.n and (depth or self.s[k] not in " \t\n"):
                        depth += (self.s[k] == "(") - (self.s[k] == ")")
                        k += 1
                    tokens[-1] = ("op", "=~")
                    tokens.append(("regex", self.s[self.i:k]))
                    self.i = k
                    continue
                w = self.read_word()
                if w is None:
                    raise self.syntax("unexpected token inside '[[ ]]'", start)
                lit = _literal(w)
                tokens.append(("word", lit) if lit in ("=~",) else ("w", w))

    def parse_simple(self, start, line) -> Node:
        assigns: list = []
        words: list[Word] = []
        redirs: list = []
        while True:
            self.skip_blanks()
            if self.i >= self.n:
                break
            c = self.s[self.i]
            if c in "\n;&|)":
                if c == "&" and self.starts("&>"):
                    redirs.append(self.try_redir())
                    continue
                break
            r = self.try_redir()
            if r is not None:
                redirs.append(r)
                continue
            if c == "(":
                if len(words) == 1 and not assigns:
                    save = self.i
                    self.i += 1
                    self.skip_blanks()
                    if self.peek() == ")":  # name () compound-command: a function definition
                        self.i += 1
                        self.skip_space_nl()
                        return FuncDef(line, (start, self.i), _literal(words[0]), self.parse_command())
                    self.i = save
                if not words:
                    raise self.syntax("unexpected '('")
                words.append(self._paren_literal())
                continue
            w = self.read_word()
            if w is None:
                break
            if not words:
                a = _assignment(w)
                if a is not None:
                    assigns.append(a)
                    self.assigned.add(a[0])
                    continue
            elif words and _literal(words[0]) in ("export", "declare", "typeset", "local", "readonly"):
                a = _assignment(w)
                if a is not None:
                    self.assigned.add(a[0])
            elif _literal(words[0]) in ("read", "printf", "mapfile", "readarray", "getopts"):
                lit = _literal(w)
                if lit and lit[0] in _NAME_START:
                    self.assigned.add(lit.split("[")[0])
            words.append(w)
        if not (assigns or words or redirs):
            c = self.peek()
            raise self.syntax(f"unexpected '{c}'" if c else "unexpected end of file")
        return Simple(line, (start, self.i), assigns, words, redirs)

    def _paren_literal(self) -> Word:
        """'(...)' as an argument: bash rejects it (syntax error); read it as one literal word."""
        start, depth, k = self.i, 0, self.i
        while k < self.n:
            c = self.s[k]
            if c == "(":
                depth += 1
            elif c == ")":
                depth -= 1
                if depth == 0:
                    k += 1
                    break
            elif c == "\n":
                raise self.syntax("unexpected '('", start)
            k += 1
        else:
            raise self.syntax("unexpected '('", start)
        text = self.s[start:k]
        self.i = k
        rest = self.read_word()
        self.st.note(f"line {self.line(start)}: bash would stop at the unquoted '(' of {text!r} (syntax error); "
                     "planner reads it as the literal word it was meant to be; quote it in the script")
        return Word([("paren", text)] + (rest.parts if rest else []), start, self.i)

    def try_redir(self):
        s, i = self.s, self.i
        k = i
        while k < self.n and s[k] in _DIGITS:  # an fd number directly before < or >
            k += 1
        if not (k < self.n and s[k] in "<>") and not (k == i and s.startswith("&>", i)):
            return None
        for op in ("<<<", "<<-", "<<", "<>", "<&", "<", "&>>", "&>", ">>", ">&", ">|", ">"):
            if s.startswith(op, k):
                break
        else:
            return None
        self.i = k + len(op)
        self.skip_blanks()
        target = self.read_word()
        if target is None:
            raise self.syntax(f"'{op}' needs a target")
        if op in ("<<", "<<-"):
            doc = {"delim": _unquoted_text(target), "strip": op == "<<-",
                   "quoted": any(p[0] in ("q", "dq") for p in target.parts), "body": None,
                   "line": self.line()}
            self.pending.append(doc)
            return (op, None, doc)
        return (op, target, None)

    def _heredoc_body(self, doc: dict) -> None:
        s, lines, start = self.s, [], self.i
        while self.i < self.n:
            j = s.find("\n", self.i)
            end = self.n if j < 0 else j
            line = s[self.i:end]
            self.i = min(end + 1, self.n)
            if (line.lstrip("\t") if doc["strip"] else line) == doc["delim"]:
                break
            lines.append(line.lstrip("\t") if doc["strip"] else line)
        body = "\n".join(lines) + ("\n" if lines else "")
        if doc["quoted"]:
            doc["body"] = Word([("q", body)], start, self.i)
        else:
            sub = _Parser(body, self.st, self.line(start) - 1)
            doc["body"] = sub.read_until("", in_dq=True, heredoc=True)

    # words ----------------------------------------------------------------------------------
    def read_word(self) -> Word | None:
        s, n = self.s, self.n
        start = self.i
        parts: list = []
        while self.i < n:
            c = s[self.i]
            if c in _META:
                if c == "(" and parts and _assign_prefix(parts):
                    parts.append(("array", self._array_body()))
                    continue
                break
            if c == "\\":
                if self.i + 1 < n:
                    if s[self.i + 1] == "\n":
                        self.i += 2
                        continue
                    parts.append(("q", s[self.i + 1]))
                    self.i += 2
                else:
                    parts.append(("lit", "\\"))
                    self.i += 1
            elif c == "'":
                j = s.find("'", self.i + 1)
                if j < 0:
                    raise self.syntax("a ' quote is never closed", self.i)
                parts.append(("q", s[self.i + 1:j]))
                self.i = j + 1
            elif c == '"':
                self.i += 1
                parts.append(("dq", self.read_dq()))
            elif c == "$":
                parts.append(self.read_dollar(in_dq=False))
            elif c == "`":
                parts.append(self.read_backtick())
            elif c == _PH:
                parts.append(self.read_ph())
            else:
                j = self.i
                while j < n and s[j] not in _WORD_SPECIAL:
                    j += 1
                parts.append(("lit", s[self.i:j]))
                self.i = j
        if not parts:
            return None
        return Word(parts, start, self.i)

    def read_ph(self):
        j = self.s.find(_PH, self.i + 1)
        if j < 0 or not self.s[self.i + 1:j].isdigit():
            raise _err("The script contains a NUL character, which bash drops and planner refuses.")
        text = self.s[self.i:j + 1]
        self.i = j + 1
        return ("ph", text)

    def _array_body(self) -> list[Word]:
        start = self.i
        self.i += 1
        items: list[Word] = []
        while True:
            self.skip_blanks()
            c = self.peek()
            if c == "\n":
                self.newline()
                continue
            if c == ")":
                self.i += 1
                return items
            if c == "":
                raise self.syntax("an array '(' is never closed with ')'", start)
            if c == "(":
                items.append(self._paren_literal())
                continue
            w = self.read_word()
            if w is None:
                raise self.syntax(f"unexpected '{c}' in an array", self.i)
            items.append(w)

    def read_dq(self) -> list:
        """Inside "...": $ expansions, backticks and \\$ \\` \\" \\\\ escapes; the rest is literal."""
        start = self.i - 1
        parts = self._read_quoted('"', start)
        return parts

    def _read_quoted(self, close: str, start: int, heredoc: bool = False, end: int | None = None) -> list:
        s = self.s
        n = self.n if end is None else end
        parts: list = []
        buf: list[str] = []
        escapable = "$`\\\n" if heredoc else '$`"\\\n'
        while self.i < n:
            c = s[self.i]
            if close and c == close:
                self.i += 1
                if buf:
                    parts.append(("q", "".join(buf)))
                return parts
            if c == "\\" and self.i + 1 < n and s[self.i + 1] in escapable:
                if s[self.i + 1] != "\n":
                    buf.append(s[self.i + 1])
                self.i += 2
            elif c in "$`" + _PH:
                if buf:
                    parts.append(("q", "".join(buf)))
                    buf = []
                if c == "$":
                    parts.append(self.read_dollar(in_dq=True))
                elif c == "`":
                    parts.append(self.read_backtick())
                else:
                    parts.append(self.read_ph())
            else:
                j = self.i + 1
                while j < n and s[j] not in "\\$`\x00" + close:
                    j += 1
                buf.append(s[self.i:j])
                self.i = j
        if close:
            raise self.syntax('a " quote is never closed', start)
        if buf:
            parts.append(("q", "".join(buf)))
        return parts

    def read_until(self, stop: str, in_dq: bool, heredoc: bool = False, end: int | None = None) -> Word:
        """A word up to an unquoted character of ``stop`` (or ``end``): the inside of ${...}, the
        body of $((...)) or of a here-document. Blanks are part of it."""
        start = self.i
        if heredoc:
            return Word(self._read_quoted("", start, heredoc=True), start, self.n)
        s = self.s
        n = self.n if end is None else end
        parts: list = []
        while self.i < n:
            c = s[self.i]
            if c in stop:
                break
            if c == "\\" and self.i + 1 < n:
                if s[self.i + 1] != "\n":
                    parts.append(("q", s[self.i + 1]))
                self.i += 2
            elif c == "'" and not in_dq:
                j = s.find("'", self.i + 1)
                if j < 0 or j >= n:
                    raise self.syntax("a ' quote is never closed", self.i)
                parts.append(("q", s[self.i + 1:j]))
                self.i = j + 1
            elif c == '"':
                self.i += 1
                parts.append(("dq", self._read_quoted('"', self.i - 1, end=n)))
            elif c == "$":
                parts.append(self.read_dollar(in_dq=in_dq))
            elif c == "`":
                parts.append(self.read_backtick())
            elif c == _PH:
                parts.append(self.read_ph())
            else:
                j = self.i + 1
                while j < n and s[j] not in stop and s[j] not in "\\'\"$`\x00":
                    j += 1
                parts.append(("lit", s[self.i:j]))
                self.i = j
        return Word(parts, start, self.i)

    def _sub_word(self, a: int, b: int) -> Word:
        save = self.i
        self.i = a
        w = self.read_until("", in_dq=True, end=b)
        self.i = save
        return w

    def read_backtick(self):
        start = self.i
        k = self.i + 1
        while k < self.n and self.s[k] != "`":
            k += 2 if self.s[k] == "\\" else 1
        if k >= self.n:
            raise self.syntax("a ` quote is never closed", start)
        self.i = k + 1
        return ("cmd", self.s[start:self.i])

    def _skip_cmdsub(self, k: int) -> int:
        """Index just past the ')' closing the command substitution whose '(' is at k - 1."""
        self.st.enter("command substitutions")
        try:
            depth, s, n = 1, self.s, self.n
            while k < n:
                c = s[k]
                if c == "\\":
                    k += 2
                    continue
                if c == "'":
                    j = s.find("'", k + 1)
                    k = n if j < 0 else j + 1
                    continue
                if c == '"':
                    k += 1
                    while k < n and s[k] != '"':
                        if s[k] == "\\":
                            k += 2
                        elif s.startswith("$(", k):
                            k = self._skip_cmdsub(k + 2)
                        else:
                            k += 1
                    k += 1
                    continue
                if c == "(":
                    depth += 1
                elif c == ")":
                    depth -= 1
                    if depth == 0:
                        return k + 1
                k += 1
            raise self.syntax("a '$(' is never closed", k)
        finally:
            self.st.leave()

    def _match_double_paren(self, k: int) -> int:
        """Index of the '))' closing a '((' whose body starts at k."""
        depth, s, n = 0, self.s, self.n
        while k < n:
            c = s[k]
            if c == "(":
                depth += 1
            elif c == ")":
                if depth == 0:
                    if k + 1 < n and s[k + 1] == ")":
                        return k
                    raise self.syntax("'((' is not closed by '))'", k)
                depth -= 1
            elif c == "\n" and False:
                pass
            k += 1
        raise self.syntax("'((' is never closed with '))'", k)

    def read_dollar(self, in_dq: bool):
        s, i = self.s, self.i
        nxt = s[i + 1] if i + 1 < self.n else ""
        if nxt == "{":
            return self.read_brace_param(in_dq)
        if nxt == "(":
            if s.startswith("$((", i):
                try:
                    end = self._match_double_paren(i + 3)
                except PlannerError:
                    end = None
                if end is not None:
                    expr = self._sub_word(i + 3, end)
                    self.i = end + 2
                    return ("arith", expr)
            end = self._skip_cmdsub(i + 2)
            self.i = end
            return ("cmd", s[i:end])
        if nxt == "'" and not in_dq:
            return ("q", self._ansi_c())
        if nxt == '"' and not in_dq:
            self.i += 2
            return ("dq", self._read_quoted('"', i))
        if nxt and nxt in _NAME_START:
            j = i + 1
            while j < self.n and s[j] in _NAME_CHARS:
                j += 1
            self.i = j
            return ("param", Param(s[i + 1:j], text=s[i:j]))
        if nxt and (nxt in _DIGITS or nxt in _SPECIAL_PARAMS):
            self.i = i + 2
            return ("param", Param(nxt, text=s[i:i + 2]))
        self.i = i + 1
        return ("q" if in_dq else "lit", "$")

    def _ansi_c(self) -> str:
        s, k = self.s, self.i + 2
        out = []
        simple = {"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "f": "\f", "v": "\v", "e": "\x1b",
                  "E": "\x1b", "\\": "\\", "'": "'", '"': '"', "?": "?"}
        while k < self.n and s[k] != "'":
            c = s[k]
            if c == "\\" and k + 1 < self.n:
                d = s[k + 1]
                if d in simple:
                    out.append(simple[d])
                    k += 2
                elif d in "xuU":
                    width = {"x": 2, "u": 4, "U": 8}[d]
                    j = k + 2
                    while j < self.n and j < k + 2 + width and s[j] in "0123456789abcdefABCDEF":
                        j += 1
                    code = int(s[k + 2:j], 16) if j > k + 2 else None
                    out.append(chr(code) if code is not None and code < 0x110000 else s[k:j])
                    k = j
                elif d in "01234567":
                    j = k + 1
                    while j < self.n and j < k + 4 and s[j] in "01234567":
                        j += 1
                    out.append(chr(int(s[k + 1:j], 8) & 0xFF))
                    k = j
                else:
                    out.append(c + d)
                    k += 2
            else:
                out.append(c)
                k += 1
        if k >= self.n:
            raise self.syntax("a $' quote is never closed", self.i)
        self.i = k + 1
        return "".join(out)

    def read_brace_param(self, in_dq: bool):
        s, start = self.s, self.i
        self.st.enter("${...} expansions")
        try:
            j = start + 2
            p = Param("")
            if j + 1 < self.n and s[j] == "#" and s[j + 1] not in "}":
                if s[j + 1] in _NAME_CHARS or s[j + 1] in "@*!?$-#":
                    p.length = True
                    j += 1
            elif j + 1 < self.n and s[j] == "!" and s[j + 1] in _NAME_START:
                p.indirect = True
                j += 1
            k = j
            if k < self.n and s[k] in _NAME_START:
                while k < self.n and s[k] in _NAME_CHARS:
                    k += 1
            elif k < self.n and s[k] in _DIGITS:
                while k < self.n and s[k] in _DIGITS:
                    k += 1
            elif k < self.n and s[k] in _SPECIAL_PARAMS:
                k += 1
            p.name = s[j:k]
            if not p.name:
                raise self.syntax("bad substitution", start)
            self.i = k
            if self.peek() == "[":
                depth, m = 0, self.i
                while m < self.n:
                    depth += (s[m] == "[") - (s[m] == "]")
                    if depth == 0:
                        break
                    m += 1
                if m >= self.n:
                    raise self.syntax("a '[' in ${...} is never closed", start)
                inner = s[self.i + 1:m]
                p.index = inner if inner in ("@", "*") else self._sub_word(self.i + 1, m)
                self.i = m + 1
            if self.i >= self.n:
                raise self.syntax("a '${' is never closed with '}'", start)
            rest = s[self.i:self.i + 2]
            if rest[:1] == "}":
                pass
            elif p.length or p.indirect:
                if p.indirect and rest[:1] in "@*" and s[self.i + 1:self.i + 2] == "}":
                    p.op = "names"
                    self.i += 1
                else:
                    raise self.syntax("bad substitution", start)
            else:
                for op in (":-", ":=", ":+", ":?", "##", "%%", "//", "/#", "/%", "^^", ",,",
                           "-", "=", "+", "?", "#", "%", "/", ":", "^", ",", "@"):
                    if rest.startswith(op):
                        break
                else:
                    raise self.syntax("bad substitution", start)
                p.op = op
                self.i += len(op)
                if op in ("/", "//", "/#", "/%"):
                    p.arg = self.read_until("/}", in_dq)
                    if self.peek() == "/":
                        self.i += 1
                        p.arg2 = self.read_until("}", in_dq)
                elif op == ":":
                    p.arg = self.read_until(":}", in_dq)
                    if self.peek() == ":":
                        self.i += 1
                        p.arg2 = self.read_until("}", in_dq)
                else:
                    p.arg = self.read_until("}", in_dq)
                if op in (":=", "="):
                    self.assigned.add(p.name)
            if self.peek() != "}":
                raise self.syntax("a '${' is never closed with '}'", start)
            self.i += 1
            p.text = s[start:self.i]
            return ("param", p)
        finally:
            self.st.leave()


def _snip(text: str) -> str:
    text = " ".join(text.split())
    text = text.rstrip(";").strip()
    return text if len(text) <= 80 else text[:77] + "..."


def _literal(w: Word) -> str:
    """The word's text when it is plain literal (quotes removed), else ''."""
    out = []
    for kind, val in w.parts:
        if kind in ("lit", "q", "paren"):
            out.append(val)
        elif kind == "dq" and all(k == "q" for k, _ in val):
            out.append("".join(v for _, v in val))
        else:
            return ""
    return "".join(out)


def _unquoted_text(w: Word) -> str:
    out = []
    for kind, val in w.parts:
        if kind == "dq":
            out.append("".join(v for k, v in val if k == "q"))
        elif kind in ("lit", "q"):
            out.append(val)
        elif kind == "param":
            out.append(val.text)
    return "".join(out)


def _is_name(text: str) -> bool:
    return bool(text) and text[0] in _NAME_START and all(c in _NAME_CHARS for c in text)


def _assign_prefix(parts: list) -> bool:
    """Whether the parts read so far are 'NAME=' or 'NAME+=' (an array body follows)."""
    if len(parts) != 1 or parts[0][0] != "lit":
        return False
    t = parts[0][1]
    if t.endswith("+="):
        t = t[:-2]
    elif t.endswith("="):
        t = t[:-1]
    else:
        return False
    return _is_name(t)


def _assignment(w: Word):
    """(name, index Word | None, append, value Word) when the word is an assignment."""
    if not w.parts or w.parts[0][0] != "lit":
        return None
    head = w.parts[0][1]
    k = 0
    while k < len(head) and head[k] in _NAME_CHARS:
        k += 1
    name = head[:k]
    if not _is_name(name):
        return None
    rest = head[k:]
    index = None
    tail_parts = w.parts[1:]
    if rest.startswith("["):
        # NAME[...]=: the subscript may span parts (arr[$i]=x)
        sub_parts, found = [], None
        inner = rest[1:]
        seq = [("lit", inner)] + list(tail_parts)
        for pos, (kind, val) in enumerate(seq):
            if kind == "lit" and "]" in val:
                a, _, b = val.partition("]")
                if a:
                    sub_parts.append(("lit", a))
                found = (b, seq[pos + 1:])
                break
            sub_parts.append((kind, val))
        if found is None:
            return None
        rest, tail_parts = found
        index = Word(sub_parts)
    if rest.startswith("+="):
        append, rest = True, rest[2:]
    elif rest.startswith("="):
        append, rest = False, rest[1:]
    else:
        return None
    value_parts = ([("lit", rest)] if rest else []) + list(tail_parts)
    return (name, index, append, Word(value_parts, w.start, w.end))


# ---------------------------------------------------------------------------------------------
# brace expansion: {a,b,c} and {1..8}, {01..16..2}, {a..e}, within unquoted literal text
# ---------------------------------------------------------------------------------------------


def _brace_match(s: str, i: int) -> tuple[int, list[int]] | None:
    """(index of the '}' closing the '{' at i, top-level comma positions), or None."""
    depth, commas = 0, list[int]()
    for k in range(i, len(s)):
        c = s[k]
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return k, commas
        elif c == "," and depth == 1:
            commas.append(k)
    return None


def _brace_sequence(inner: str) -> list[str] | None:
    parts = inner.split("..")
    if len(parts) not in (2, 3):
        return None
    step_text = parts[2] if len(parts) == 3 else "1"
    if not step_text.lstrip("-").isdigit() or len(step_text) > 18:
        return None
    step = abs(int(step_text)) or 1
    a, b = parts[0], parts[1]
    if all(x.lstrip("-").isdigit() and 0 < len(x) <= 18 for x in (a, b)):
        x, y = int(a), int(b)
        if abs(y - x) // step >= MAX_ITEMS:
            raise _err(f"The brace expansion {{{inner}}} gives more than {MAX_ITEMS:,} words; planner stops reading.")
        width = max(len(a), len(b)) if (a.lstrip("-").startswith("0") and len(a.lstrip("-")) > 1) or \
            (b.lstrip("-").startswith("0") and len(b.lstrip("-")) > 1) else 0
        rng = range(x, y + 1, step) if y >= x else range(x, y - 1, -step)
        return [str(v).zfill(width) if v >= 0 else "-" + str(-v).zfill(width - 1) for v in rng]
    if len(a) == 1 and len(b) == 1 and a.isalpha() and b.isalpha():
        x, y = ord(a), ord(b)
        rng = range(x, y + 1, step) if y >= x else range(x, y - 1, -step)
        return [chr(v) for v in rng]
    return None


def _brace_text(s: str, st: _State) -> list[str]:
    """Every brace expression of a literal text, expanded left to right (bounded)."""
    st.enter("brace expansion")
    try:
        i = s.find("{")
        while i >= 0:
            m = _brace_match(s, i)
            if m is not None:
                j, commas = m
                inner = s[i + 1:j]
                if commas:
                    bounds = [i] + commas + [j]
                    alts: list[str] | None = [x for a, b in zip(bounds, bounds[1:]) for x in _brace_text(s[a + 1:b], st)]
                else:
                    alts = _brace_sequence(inner)
                if alts is not None:
                    rest = _brace_text(s[j + 1:], st)
                    if len(alts) * len(rest) > MAX_ITEMS:
                        raise _err(f"A brace expansion in the script gives more than {MAX_ITEMS:,} words; "
                                   "planner stops reading it.")
                    st.step(len(alts) * len(rest))
                    return [s[:i] + a + b for a in alts for b in rest]
            i = s.find("{", i + 1)
        return [s]
    finally:
        st.leave()


def _brace_parts(parts: list, st: _State) -> list[list]:
    """The word's parts once for each word brace expansion makes (a brace expression is read
    within one unquoted literal piece, as in {0..7} or run{1,2}.log)."""
    out: list[list] = [[]]
    for part in parts:
        if part[0] == "lit" and "{" in part[1] and "}" in part[1]:
            alts = _brace_text(part[1], st)
            if len(out) * len(alts) > MAX_ITEMS:
                raise _err(f"A brace expansion in the script gives more than {MAX_ITEMS:,} words; planner stops reading it.")
            out = [prev + [("lit", a)] for prev in out for a in alts]
        else:
            for prev in out:
                prev.append(part)
    return out


# ---------------------------------------------------------------------------------------------
# glob patterns (case, [[ == ]], ${X#pat}): an NFA walk, O(len(text) * len(pattern))
# ---------------------------------------------------------------------------------------------

_CLASSES = {"alpha": str.isalpha, "digit": str.isdigit, "alnum": str.isalnum, "upper": str.isupper,
            "lower": str.islower, "space": str.isspace, "blank": lambda c: c in " \t",
            "punct": lambda c: c.isprintable() and not c.isalnum() and not c.isspace(),
            "xdigit": lambda c: c in "0123456789abcdefABCDEF"}


def _compile_pattern(chunks: list[tuple[str, bool]]) -> list:
    """Tokens from (text, quoted) chunks: ('c', ch), ('?',), ('*',), ('[', negate, items)."""
    toks: list = []
    for text, quoted in chunks:
        if quoted:
            toks.extend(("c", ch) for ch in text)
            continue
        i, n = 0, len(text)
        while i < n:
            c = text[i]
            if c == "*":
                if not toks or toks[-1] != ("*",):
                    toks.append(("*",))
                i += 1
            elif c == "?":
                toks.append(("?",))
                i += 1
            elif c == "[":
                j = i + 1
                negate = j < n and text[j] in "!^"
                j += negate
                items: list[tuple] = []
                first = True
                while j < n and (text[j] != "]" or first):
                    first = False
                    if text.startswith("[:", j):
                        e = text.find(":]", j + 2)
                        if e > 0 and text[j + 2:e] in _CLASSES:
                            items.append(("class", text[j + 2:e]))
                            j = e + 2
                            continue
                    if j + 2 < n and text[j + 1] == "-" and text[j + 2] != "]":
                        items.append(("range", text[j], text[j + 2]))
                        j += 3
                    else:
                        items.append(("range", text[j], text[j]))
                        j += 1
                if j < n:
                    toks.append(("[", negate, items))
                    i = j + 1
                else:
                    toks.append(("c", "["))
                    i += 1
            elif c == "\\" and i + 1 < n:
                toks.append(("c", text[i + 1]))
                i += 2
            else:
                toks.append(("c", c))
                i += 1
    return toks


def _tok_matches(tok, ch: str) -> bool:
    kind = tok[0]
    if kind == "c":
        return tok[1] == ch
    if kind == "?":
        return True
    hit = False
    for item in tok[2]:
        if item[0] == "class":
            hit = _CLASSES[item[1]](ch)
        else:
            hit = item[1] <= ch <= item[2]
        if hit:
            break
    return hit != tok[1]


def _closure(toks: list, states: set[int]) -> set[int]:
    out = set(states)
    stack = list(states)
    while stack:
        k = stack.pop()
        if k < len(toks) and toks[k] == ("*",) and k + 1 not in out:
            out.add(k + 1)
            stack.append(k + 1)
    return out


def _prefix_matches(toks: list, text: str, st: _State, start: int = 0) -> list[int]:
    """Lengths L such that text[start:start+L] matches the whole pattern."""
    n, m = len(text), len(toks)
    states = _closure(toks, {0})
    out = [0] if m in states else []
    for k in range(start, n):
        if not states:
            break
        st.spend(len(states) + 1)
        ch = text[k]
        nxt = set()
        for s in states:
            if s < m:
                t = toks[s]
                if t == ("*",):
                    nxt.add(s)
                elif _tok_matches(t, ch):
                    nxt.add(s + 1)
        states = _closure(toks, nxt)
        if m in states:
            out.append(k - start + 1)
    return out


def _reverse_tokens(toks: list) -> list:
    return list(reversed(toks))


def glob_match(toks: list, text: str, st: _State) -> bool:
    return len(text) in _prefix_matches(toks, text, st)


# ---------------------------------------------------------------------------------------------
# arithmetic (bash's expr.c semantics on 64-bit integers)
# ---------------------------------------------------------------------------------------------

_MASK = (1 << 64) - 1
_MIN = -(1 << 63)


def _wrap(x: int) -> int:
    x &= _MASK
    return x - (1 << 64) if x >> 63 else x


class _Unknown(Exception):
    pass


class _ArithError(Exception):
    pass


_BINARY = {  # operator -> (precedence, right associative)
    ",": (1, False), "?": (3, True),
    "||": (4, False), "&&": (5, False), "|": (6, False), "^": (7, False), "&": (8, False),
    "==": (9, False), "!=": (9, False), "<": (10, False), ">": (10, False), "<=": (10, False), ">=": (10, False),
    "<<": (11, False), ">>": (11, False), "+": (12, False), "-": (12, False),
    "*": (13, False), "/": (13, False), "%": (13, False), "**": (15, True),
}
_ASSIGN = ("=", "*=", "/=", "%=", "+=", "-=", "<<=", ">>=", "&=", "^=", "|=")
_OPS = sorted(set(_BINARY) | set(_ASSIGN) | {"++", "--", "!", "~", "(", ")", ":"}, key=len, reverse=True)


def _apply(op: str, a: int, b: int) -> int:
    if op == "+":
        return _wrap(a + b)
    if op == "-":
        return _wrap(a - b)
    if op == "*":
        return _wrap(a * b)
    if op in ("/", "%"):
        if b == 0:
            raise _ArithError("division by 0")
        if a == _MIN and b == -1:  # bash returns INT_MIN and 0 rather than trap
            return _MIN if op == "/" else 0
        q = abs(a) // abs(b)
        q = q if (a >= 0) == (b >= 0) else -q
        return _wrap(q) if op == "/" else _wrap(a - q * b)
    if op == "**":
        if b < 0:
            raise _ArithError("exponent less than 0")
        result, base = 1, a
        while b:  # square and multiply, wrapping like bash's ipow: at most 63 rounds
            if b & 1:
                result = _wrap(result * base)
            base = _wrap(base * base)
            b >>= 1
        return result
    if op == "<<":
        return _wrap(a << (b & 63))
    if op == ">>":
        return a >> (b & 63)
    if op == "&":
        return a & b
    if op == "|":
        return a | b
    if op == "^":
        return a ^ b
    cmp = {"==": a == b, "!=": a != b, "<": a < b, ">": a > b, "<=": a <= b, ">=": a >= b}
    return int(cmp[op])


class _Arith:
    """Pratt parser that evaluates as it goes; ``live=False`` parses a short-circuited operand
    without evaluating it (bash neither assigns nor complains about its variables)."""

    def __init__(self, text: str, shell: Shell, bash_mode: bool):
        self.toks = self._tokens(text)
        self.k = 0
        self.sh = shell
        self.bash = bash_mode

    @staticmethod
    def _tokens(text: str) -> list:
        toks: list[tuple] = []
        i, n = 0, len(text)
        while i < n:
            c = text[i]
            if c in " \t\n\r":
                i += 1
            elif c in _DIGITS:
                j = i
                while j < n and (text[j] in _NAME_CHARS or text[j] in "#@"):
                    j += 1
                toks.append(("num", text[i:j]))
                i = j
            elif c in _NAME_START:
                j = i
                while j < n and text[j] in _NAME_CHARS:
                    j += 1
                name = text[i:j]
                if j < n and text[j] == "[":
                    depth, m = 0, j
                    while m < n:
                        depth += (text[m] == "[") - (text[m] == "]")
                        if depth == 0:
                            break
                        m += 1
                    if m >= n:
                        raise _ArithError("unclosed '['")
                    toks.append(("var", name, text[j + 1:m]))
                    i = m + 1
                else:
                    toks.append(("var", name, None))
                    i = j
            else:
                for op in _OPS:
                    if text.startswith(op, i):
                        toks.append(("op", op))
                        i += len(op)
                        break
                else:
                    raise _ArithError(f"syntax error: operand expected (error token is \"{text[i:i + 10]}\")")
        return toks

    def peek(self):
        return self.toks[self.k] if self.k < len(self.toks) else ("end",)

    def take_op(self, op: str) -> bool:
        if self.peek() == ("op", op):
            self.k += 1
            return True
        return False

    def run(self) -> int:
        if not self.toks:
            return 0
        v = self.expr(0, True)
        if self.k != len(self.toks):
            raise _ArithError(f"syntax error in expression (error token is \"{self.peek()[1]}\")")
        return v

    def expr(self, min_prec: int, live: bool) -> int:
        self.sh.st.enter("arithmetic")
        try:
            left = self.unary(live, min_prec)
            while True:
                t = self.peek()
                if t[0] != "op":
                    return left
                op = t[1]
                if op in _ASSIGN:
                    raise _ArithError("attempted assignment to non-variable")
                if op not in _BINARY:
                    return left
                prec, right_assoc = _BINARY[op]
                if prec < min_prec:
                    return left
                self.k += 1
                if op == "?":
                    a = self.expr(1, live and left != 0)
                    if not self.take_op(":"):
                        raise _ArithError("':' expected for conditional expression")
                    b = self.expr(3, live and left == 0)
                    left = a if left != 0 else b
                    continue
                if op in ("&&", "||"):
                    rhs_live = live and ((left != 0) if op == "&&" else (left == 0))
                    right = self.expr(prec + 1, rhs_live)
                    left = int(left != 0 and right != 0) if op == "&&" else int(left != 0 or right != 0)
                    continue
                right = self.expr(prec if right_assoc else prec + 1, live)
                if op == ",":
                    left = right
                elif live:
                    left = _apply(op, left, right)
                else:
                    left = 0
        finally:
            self.sh.st.leave()

    def unary(self, live: bool, min_prec: int = 0) -> int:
        t = self.peek()
        if t[0] == "op":
            op = t[1]
            if op in ("+", "-", "!", "~"):
                self.k += 1
                self.sh.st.enter("arithmetic")
                try:
                    v = self.unary(live)
                finally:
                    self.sh.st.leave()
                if op == "-":
                    return _wrap(-v)
                if op == "!":
                    return int(v == 0)
                if op == "~":
                    return ~v
                return v
            if op in ("++", "--"):
                self.k += 1
                var = self.peek()
                if var[0] != "var":
                    raise _ArithError(f"'{op}' needs a variable")
                self.k += 1
                v = _wrap(self.value(var, live) + (1 if op == "++" else -1))
                if live:
                    self.sh.set_arith_var(var, v)
                return v
            if op == "(":
                self.k += 1
                v = self.expr(0, live)
                if not self.take_op(")"):
                    raise _ArithError("missing ')'")
                return v
            raise _ArithError(f"syntax error: operand expected (error token is \"{op}\")")
        if t[0] == "num":
            self.k += 1
            return self.number(t[1])
        if t[0] == "var":
            self.k += 1
            nxt = self.peek()
            if nxt[0] == "op" and nxt[1] in _ASSIGN:
                if min_prec > 2:  # bash: '0 && y=1' parses as '(0 && y) = 1'
                    raise _ArithError("attempted assignment to non-variable")
                self.k += 1
                rhs = self.expr(2, live)
                op = nxt[1]
                v = rhs if op == "=" else _apply(op[:-1], self.value(t, live), rhs)
                if live:
                    self.sh.set_arith_var(t, v)
                return v
            if nxt[0] == "op" and nxt[1] in ("++", "--"):
                self.k += 1
                v = self.value(t, live)
                if live:
                    self.sh.set_arith_var(t, _wrap(v + (1 if nxt[1] == "++" else -1)))
                return v
            return self.value(t, live)
        raise _ArithError("syntax error: operand expected")

    def value(self, var, live: bool) -> int:
        if not live:
            return 0
        return self.sh.arith_var(var, self.bash)

    @staticmethod
    def number(text: str) -> int:
        base, digits = 10, text
        if "#" in text:
            b, _, digits = text.partition("#")
            if not b.isdigit() or not 2 <= int(b[:3]) <= 64 or len(b) > 2:
                raise _ArithError(f"invalid arithmetic base (error token is \"{text}\")")
            base = int(b)
        elif len(text) > 1 and text[0] == "0" and text[1] in "xX":
            base, digits = 16, text[2:]
        elif len(text) > 1 and text[0] == "0":
            base, digits = 8, text[1:]
        if not digits:
            raise _ArithError(f"invalid number (error token is \"{text}\")")
        v = 0
        for ch in digits:  # digit by digit with wrap-around, as bash's strtoimax-free loop does
            if ch in _DIGITS:
                d = ord(ch) - 48
            elif "a" <= ch <= "z":
                d = ord(ch) - 87
            elif "A" <= ch <= "Z":
                d = ord(ch) - 29 if base > 36 else ord(ch) - 55
            elif ch == "@":
                d = 62
            elif ch == "_":
                d = 63
            else:
                d = 99
            if d >= base:
                raise _ArithError(f"value too great for base (error token is \"{text}\")")
            v = _wrap(v * base + d)
        return v


# ---------------------------------------------------------------------------------------------
# the interpreter
# ---------------------------------------------------------------------------------------------


class _Exit(Exception):
    def __init__(self, status, line):
        self.status, self.line = status, line


class _Return(Exception):
    def __init__(self, status):
        self.status = status


class _Break(Exception):
    def __init__(self, n):
        self.n = n


class _Continue(Exception):
    def __init__(self, n):
        self.n = n


_BREAK = object()  # field boundary from "${A[@]}"
_NOTHING = object()  # "${A[@]}" of an empty array: no field at all


class Shell:
    def __init__(self, st: _State, *, environ: Mapping[str, str] | None = None, args: Sequence[str] = (),
                 name: str = "script", where: str = ""):
        self.st = st
        self.vars: dict[str, str | list] = {}
        self.exported: set[str] = set()
        self.unsupported: set[str] = set()
        self.positional = [_check_len(str(a)) for a in args]
        self.name = name
        self.funcs: dict[str, Node] = {}
        self.status: int | None = 0
        self.where = where
        self.assigned: set[str] = set()
        self.locals: list[dict] = []
        for k, v in (environ or {}).items():
            if _is_name(k):
                self.vars[k] = _check_len(str(v))
                self.exported.add(k)

    # entry ----------------------------------------------------------------------------------
    def run_text(self, text: str, line0: int = 0) -> None:
        """Parse and run one top-level command at a time, as bash does. A variable counts as the
        script's own (empty when unset) once any command parsed so far assigns it."""
        parser = _Parser(text, self.st, line0)
        while True:
            node = parser.next_command()
            if node is None:
                return
            self.assigned |= parser.assigned
            self.run(node)

    # variables ------------------------------------------------------------------------------
    def get(self, name: str):
        if name in self.unsupported:
            return self.st.ph("opaque", f"${name}")
        return self.vars.get(name)

    def set_scalar(self, name: str, value: str, append: bool = False) -> None:
        if name in self.unsupported:
            return
        old = self.vars.get(name)
        if isinstance(old, list):
            if append:
                old0 = old[0] if old and old[0] is not None else ""
                value = old0 + value
            _check_len(value)
            if old:
                old[0] = value
            else:
                old.append(value)
            return
        if append and old is not None:
            value = old + value
        self.vars[name] = _check_len(value)

    def set_array(self, name: str, items: list[str], append: bool = False) -> None:
        old = self.vars.get(name)
        if append and old is not None:
            base = old if isinstance(old, list) else [old]
            items = base + items
        if len(items) > MAX_ITEMS:
            raise _err(f"An array in the script grows beyond {MAX_ITEMS:,} items; planner stops reading it.")
        self.vars[name] = list(items)

    def set_element(self, name: str, index: int, value: str, append: bool = False) -> None:
        arr = self.vars.get(name)
        if not isinstance(arr, list):
            arr = [] if arr is None else [arr]
            self.vars[name] = arr
        if index < 0:
            index += len(arr)
            if index < 0:
                raise _err(f"Array index below zero for {name}; bash refuses this assignment.")
        if index >= MAX_ITEMS:
            raise _err(f"Array index {index} of {name} is beyond {MAX_ITEMS:,}; planner stops reading the script.")
        while len(arr) <= index:
            arr.append(None)
        old = arr[index]
        arr[index] = _check_len((old or "") + value if append else value)

    def arith_var(self, var, bash_mode: bool) -> int:
        _, name, sub = var
        if sub is not None:
            idx = self.arith_text(self.expand_text(self._word_of(sub), bash=True), True)
            if idx is None:
                raise _Unknown()
            v = self.vars.get(name)
            arr = v if isinstance(v, list) else ([] if v is None else [v])
            if idx < 0:
                idx += len(arr)
            v = arr[idx] if 0 <= idx < len(arr) else None
        else:
            v = self.get(name)
            if isinstance(v, list):
                v = v[0] if v else None
        if v is None:
            if bash_mode or name in self.assigned:
                return 0
            self._unset_use(f"${name}")
            raise _Unknown()
        text = self.st.strip_unset(v) if bash_mode else v
        if _PH in text:
            raise _Unknown()
        text = text.strip()
        if not text:
            return 0
        if text.lstrip("-").isdigit() and len(text) < 19:
            return int(text)
        r = _Arith(text, self, bash_mode).run()  # a variable's value is itself an expression
        return r

    def set_arith_var(self, var, value: int) -> None:
        _, name, sub = var
        if sub is not None:
            idx = self.arith_text(self.expand_text(self._word_of(sub), bash=True), True)
            if idx is None:
                return
            self.set_element(name, idx, str(value))
        else:
            self.set_scalar(name, str(value))

    def _word_of(self, text: str) -> Word:
        p = _Parser(text, self.st)
        return p.read_until("", in_dq=True)

    def _unset_use(self, display: str) -> None:
        self.st.unresolved[display] = None

    # arithmetic -----------------------------------------------------------------------------
    def arith_text(self, text: str, bash_mode: bool, line: int | None = None) -> int | None:
        if bash_mode:
            text = self.st.strip_unset(text)
        if _PH in text:
            return None
        try:
            return _Arith(text, self, bash_mode).run()
        except _Unknown:
            return None
        except _ArithError as exc:
            where = f"line {line}: " if line else ""
            raise ScriptStop(f"The script's arithmetic fails: {where}$(({self.st.render(text).strip()})): {exc} "
                             "(bash stops the script here).") from None

    # expansion ------------------------------------------------------------------------------
    def expand(self, w: Word, bash: bool = False) -> list[str]:
        """Fields of a word: brace expansion, parameter/arithmetic expansion, word splitting, quote
        removal (no pathname expansion: planner never looks at files, and bash leaves a pattern
        that matches none as it is)."""
        out: list[str] = []
        for parts in _brace_parts(w.parts, self.st):
            out.extend(self._split(self._pieces(parts, False, False, bash), bash))
        return out

    def expand_text(self, w: Word, bash: bool = False) -> str:
        """A word without field splitting (assignments, here-documents, ${X:-...} defaults)."""
        out = []
        for p in self._pieces(w.parts, False, False, bash):
            if p is _BREAK:
                out.append(" ")
            elif p is not _NOTHING:
                out.append(p[0])
        return _check_len("".join(out))

    def _pieces(self, parts: list, quoted: bool, in_arg: bool, bash: bool) -> list:
        out: list = []
        for kind, val in parts:
            self.st.step()
            if kind in ("lit", "paren"):
                out.append((val, in_arg and not quoted, True))
            elif kind == "q":
                out.append((val, False, True))
            elif kind == "dq":
                sub = self._pieces(val, True, in_arg, bash)
                if not sub:
                    sub = [("", False, True)]
                out.extend(sub)
            elif kind == "param":
                out.extend(self._param(val, quoted, bash))
            elif kind == "cmd":
                res = self._builtin_substitution(val)
                if res is None:
                    self.st.not_run[val] = None
                    out.append((self.st.ph("opaque", val), False, True))
                else:
                    out.append((res, not quoted, quoted))
            elif kind == "arith":
                text = self.expand_text(val, bash)
                v = self.arith_text(text, bash)
                res = str(v) if v is not None else self.st.ph("opaque", "$((" + self.st.render(text) + "))")
                out.append((res, not quoted, quoted))
            elif kind == "ph":
                if bash:
                    val = self.st.strip_unset(val)
                out.append((val, False, True))
            elif kind == "array":
                texts = [t for w in val for t in self.expand(w, bash)]
                out.append(("(" + " ".join(texts) + ")", False, True))
        return out

    def _builtin_substitution(self, text: str) -> str | None:
        """The output of a command substitution that only bash's own builtins make, or None.

        Scripts join arrays this way (``--moe-layer-freq "[$(IFS=', '; echo "${A[*]}")]"``): a
        subshell of assignments and ``echo``/``printf`` of expansions. Nothing outside the
        interpreter is involved, so its output is as certain as any other expansion's; it is
        computed in a subshell (assignments do not leak) within the reader's step and depth
        bounds. Anything else (a pipe, a redirection, any other command, a script function
        shadowing echo or printf, ``echo -e``) stays unknown and is listed in ``not_run``."""
        if text.startswith("$(") and text.endswith(")"):
            source = text[2:-1]
        elif len(text) >= 2 and text[0] == text[-1] == "`":
            source = _backtick_body(text[1:-1])
        else:
            return None
        # A subshell is parsed and run for each one: it counts as SUBSTITUTION_STEPS steps, so a
        # script of many thousands of them stops at the step bound, not after seconds.
        self.st.step(SUBSTITUTION_STEPS)
        try:
            body = _Parser(source, self.st).parse_program()
        except ScriptStop:
            return None  # as before: bash's error, if any, is bash's to report
        if not all(isinstance(n, Simple) and not n.redirs and self._prints_only(n) for n in body.items):
            return None
        self.st.enter("command substitutions")
        out: list[str] = []
        try:
            def run() -> int | None:
                for node in body.items:
                    if not node.words:
                        for a in node.assigns:
                            self._assign(a)
                        continue
                    saved = {a[0]: self.vars.get(a[0]) for a in node.assigns}
                    for a in node.assigns:  # NAME=v echo ...: v holds while the builtin expands
                        self._assign(a)
                    fields = [f for w in node.words for f in self.expand(w)]
                    for k, v in saved.items():
                        if v is None:
                            self.vars.pop(k, None)
                        else:
                            self.vars[k] = v
                    printed = _builtin_output(fields, self)
                    if printed is None:
                        raise _Unknown
                    out.append(printed)
                return 0

            try:
                self._subshell(run)
            except _Unknown:
                return None
        finally:
            self.st.leave()
        # bash drops the trailing newlines of a command substitution's output.
        return _check_len("".join(out).rstrip("\n"))

    def _prints_only(self, node: Simple) -> bool:
        """Whether a simple command is assignments, or echo/printf as bash's builtins."""
        if not node.words:
            return True
        head = _literal(node.words[0])
        return head in ("echo", "printf") and head not in self.funcs

    def _value(self, p: Param, bash: bool):
        """None (unset), a string, or a list (for @ and * subscripts and $@ / $*)."""
        name = p.name
        if name in ("@", "*"):
            return list(self.positional)
        if name == "#":
            return str(len(self.positional))
        if name == "?":
            return str(self.status) if self.status is not None else self.st.ph("opaque", "$?")
        if name in ("$", "!", "-"):
            return self.st.ph("opaque", "$" + name)
        if name[0] in _DIGITS:
            k = int(name[:6])
            if k == 0:
                return self.name
            return self.positional[k - 1] if k <= len(self.positional) else None
        if name in ("RANDOM", "SECONDS", "EPOCHSECONDS", "SRANDOM", "BASHPID", "LINENO") and name not in self.vars:
            return self.st.ph("opaque", "$" + name)
        v = self.get(name)
        if p.index is None:
            if isinstance(v, list):
                return v[0] if v else None
            return v
        if p.index in ("@", "*"):
            if v is None:
                return []
            return [x for x in v if x is not None] if isinstance(v, list) else [v]
        assert isinstance(p.index, Word), "a subscript is a word unless it is @ or *"
        idx = self.arith_text(self.expand_text(p.index, bash=True), True)
        if idx is None:
            return self.st.ph("opaque", self.st.render(p.text))
        arr = v if isinstance(v, list) else ([] if v is None else [v])
        if idx < 0:
            idx += len(arr)
        return arr[idx] if 0 <= idx < len(arr) else None

    def _unset_piece(self, p: Param, quoted: bool, bash: bool) -> list:
        """An unset variable where its value is used: empty when the script sets it on another path
        or when a decision is taken (bash's view), else a named placeholder for the environment's value."""
        display = self._display(p)
        internal = p.name in self.assigned
        if not internal:
            self._unset_use(display)
        if bash or internal:
            return [("", False, True)] if quoted else []
        return [(self.st.ph("unset", display), False, True)]

    @staticmethod
    def _display(p: Param) -> str:
        if p.index is None and not p.op and not p.length and not p.indirect:
            return "$" + p.name if len(p.name) == 1 or p.name[0] not in _DIGITS else "${" + p.name + "}"
        return "${" + p.name + (f"[{p.index}]" if isinstance(p.index, str) else "[...]" if p.index else "") + "}"

    def _param(self, p: Param, quoted: bool, bash: bool) -> list:
        v = self._value(p, bash)
        if p.indirect:
            if p.op == "names":
                return [(self.st.ph("opaque", p.text), False, True)]
            target = v if isinstance(v, str) else None
            if target is None or _PH in target:
                return [(self.st.ph("opaque", self.st.render(p.text)), False, True)]
            if not (_is_name(target) or target.isdigit()):
                raise _err(f"The script expands {p.text} to '{target}', which is not a variable name (bash: invalid "
                           "indirect expansion).")
            v = self._value(Param(target), bash)
        if p.length:
            if isinstance(v, list):
                return [(str(len(v)), not quoted, quoted)]
            if v is None:
                if bash or p.name in self.assigned:
                    return [("0", not quoted, quoted)]
                self._unset_use(self._display(Param(p.name)))
                return [(self.st.ph("opaque", p.text), False, True)]
            if _PH in (self.st.strip_unset(v) if bash else v):
                return [(self.st.ph("opaque", self.st.render(p.text)), False, True)]
            return [(str(len(v)), not quoted, quoted)]
        op = p.op
        if op is None:
            if v is None:
                return self._unset_piece(p, quoted, bash)
            return self._emit(v, p, quoted, bash)
        if op in (":-", "-", ":=", "=", ":+", "+", ":?", "?"):
            is_list = isinstance(v, list)
            unset = v is None or (is_list and not v and p.index in ("@", "*"))
            empty = unset or (op[0] == ":" and (("".join(v) if is_list else self.st.strip_unset(v)) == ""))
            if op in (":+", "+"):
                if empty:
                    return [("", False, True)] if quoted else []
                return self._pieces(p.arg.parts, quoted, True, bash) if p.arg else []
            if not empty:
                return self._emit(v, p, quoted, bash)
            if op in (":-", "-"):
                return self._pieces(p.arg.parts, quoted, True, bash) if p.arg else ([("", False, True)] if quoted else [])
            if op in (":=", "="):
                val = self.expand_text(p.arg, bash) if p.arg else ""
                if p.name[0] in _NAME_START:
                    self.set_scalar(p.name, val)
                return [(val, not quoted, quoted)]
            # ${X:?message}: bash stops a script when X is unset; the value is the caller's to give
            self.st.note(f"the script requires {self._display(Param(p.name))} ({p.text}): bash stops without it")
            return self._unset_piece(Param(p.name), quoted, bash)
        if v is None:
            return self._unset_piece(p, quoted, bash)
        values = v if isinstance(v, list) else [v]
        if any(_PH in (self.st.strip_unset(x) if bash else x) for x in values):
            return [(self.st.ph("opaque", self.st.render(p.text)), False, True)]
        if op in ("#", "##", "%", "%%", "/", "//", "/#", "/%"):
            toks = self._pattern(p.arg, bash) if p.arg else []
            if toks is None:
                return [(self.st.ph("opaque", self.st.render(p.text)), False, True)]
            rep = self.expand_text(p.arg2, bash) if p.arg2 else ""
            if _PH in rep:
                return [(self.st.ph("opaque", self.st.render(p.text)), False, True)]
            out = [self._pattern_op(op, x, toks, rep) for x in values]
        elif op == ":":
            out = self._substring(p, values, isinstance(v, list) and p.index in ("@", "*") or p.name in ("@", "*"), bash)
            if out is None:
                return [(self.st.ph("opaque", self.st.render(p.text)), False, True)]
        elif op in ("^", "^^", ",", ",,"):
            if p.arg and self.expand_text(p.arg, bash):
                return [(self.st.ph("opaque", self.st.render(p.text)), False, True)]
            f = {"^^": str.upper, ",,": str.lower, "^": lambda x: x[:1].upper() + x[1:],
                 ",": lambda x: x[:1].lower() + x[1:]}[op]
            out = [f(x) for x in values]
        else:  # ${X@Q} and the other transformations
            return [(self.st.ph("opaque", self.st.render(p.text)), False, True)]
        return self._emit(out if isinstance(v, list) else out[0], p, quoted, bash)

    def _emit(self, v, p: Param, quoted: bool, bash: bool) -> list:
        if bash and isinstance(v, str):
            v = self.st.strip_unset(v)
        if not isinstance(v, list):
            return [(v, not quoted, quoted)]
        if bash:
            v = [self.st.strip_unset(x) for x in v]
        star = p.index == "*" or p.name == "*"
        if quoted and star:
            ifs = self._ifs(bash)
            return [((ifs[:1] if ifs is not None else " ").join(v), False, True)]
        if not v:
            return [_NOTHING] if quoted else []
        out: list = []
        for k, x in enumerate(v):
            if k:
                out.append(_BREAK)
            out.append((x, not quoted, quoted))
        return out

    def _pattern(self, w: Word, bash: bool) -> list | None:
        chunks: list[tuple[str, bool]] = []

        def walk(parts, quoted):
            for kind, val in parts:
                if kind in ("lit", "paren"):
                    chunks.append((val, quoted))
                elif kind == "q":
                    chunks.append((val, True))
                elif kind == "dq":
                    walk(val, True)
                else:
                    text = "".join(x[0] for x in self._pieces([(kind, val)], quoted, False, bash)
                                   if x is not _BREAK and x is not _NOTHING)
                    chunks.append((text, quoted))

        walk(w.parts, False)
        if any(_PH in t for t, _ in chunks):
            return None
        return _compile_pattern(chunks)

    def _pattern_op(self, op: str, x: str, toks: list, rep: str) -> str:
        if all(t[0] == "c" for t in toks):  # a literal pattern: plain string operations
            lit = "".join(t[1] for t in toks)
            if op in ("#", "##"):
                return x[len(lit):] if x.startswith(lit) else x
            if op in ("%", "%%"):
                return x[:len(x) - len(lit)] if lit and x.endswith(lit) else x
            if not lit:
                return x
            if op == "//":
                if x.count(lit) * max(len(rep), 1) + len(x) > MAX_VALUE_CHARS:
                    _check_len("x" * (MAX_VALUE_CHARS + 1))
                return x.replace(lit, rep)
            if op == "/":
                return x.replace(lit, rep, 1)
            if op == "/#":
                return rep + x[len(lit):] if x.startswith(lit) else x
            return x[:len(x) - len(lit)] + rep if x.endswith(lit) else x
        if op in ("#", "##"):
            lens = _prefix_matches(toks, x, self.st)
            return x[(min(lens) if op == "#" else max(lens)):] if lens else x
        if op in ("%", "%%"):
            lens = _prefix_matches(_reverse_tokens(toks), x[::-1], self.st)
            return x[:len(x) - (min(lens) if op == "%" else max(lens))] if lens else x
        if op == "/#":
            lens = _prefix_matches(toks, x, self.st)
            return rep + x[max(lens):] if lens and max(lens) > 0 else x  # lengths: never negative
        if op == "/%":
            for k in range(len(x) + 1):
                self.st.spend(len(x) - k + 1)
                if glob_match(toks, x[k:], self.st):
                    return x[:k] + rep
            return x
        out, k, n = [], 0, len(x)
        replaced = False
        while k <= n:
            lens = [L for L in _prefix_matches(toks, x, self.st, k) if L > 0] if not (replaced and op == "/") else []
            if lens:
                out.append(rep)
                k += max(lens)
                replaced = True
                _check_len("".join(out))
            else:
                if k < n:
                    out.append(x[k])
                k += 1
        return "".join(out)

    def _substring(self, p: Param, values: list[str], is_list: bool, bash: bool):
        off = self.arith_text(self.expand_text(p.arg, bash), True) if p.arg else 0
        length = self.arith_text(self.expand_text(p.arg2, bash), True) if p.arg2 is not None else None
        if off is None or (p.arg2 is not None and length is None):
            return None
        if is_list:
            seq = values
            if p.name in ("@", "*"):
                seq = [self.name] + values
            start = off if off >= 0 else max(len(seq) + off, 0)
            end = len(seq) if length is None else start + length
            if length is not None and length < 0:
                raise _err(f"{p.text}: substring expression < 0 (bash refuses it).")
            return seq[start:end]
        x = values[0]
        start = off if off >= 0 else len(x) + off
        if start < 0 or start > len(x):
            return [""]
        if length is None:
            return [x[start:]]
        end = start + length if length >= 0 else len(x) + length
        if end < start:
            raise _err(f"{p.text}: substring expression < 0 (bash refuses it).")
        return [x[start:end]]

    def _ifs(self, bash: bool) -> str | None:
        v = self.vars.get("IFS")
        if isinstance(v, list):
            v = v[0] if v else None
        if v is None:
            return None
        v = self.st.strip_unset(v)
        return v if _PH not in v else None

    def _split(self, pieces: list, bash: bool) -> list[str]:
        ifs = self._ifs(bash)
        if ifs is None:
            ifs = " \t\n"
        ws = "".join(c for c in ifs if c in " \t\n")
        other = "".join(c for c in ifs if c not in " \t\n")
        fields: list[str] = []
        cur: list[str] = []
        have = False
        after_ws = False
        total = 0
        for piece in pieces:
            if piece is _NOTHING:
                continue
            if piece is _BREAK:
                if cur or have:
                    fields.append("".join(cur))
                cur, have, after_ws = [], False, False
                continue
            text, splittable, keep = piece
            total += len(text)
            if total > MAX_VALUE_CHARS * 4:
                _check_len("x" * (MAX_VALUE_CHARS + 1))
            if not splittable or not ifs:
                if text or keep:
                    have = True
                    after_ws = False
                cur.append(text)
                continue
            i, n = 0, len(text)
            while i < n:
                c = text[i]
                if c == _PH:  # a placeholder is one unit, never split
                    j = text.find(_PH, i + 1)
                    cur.append(text[i:j + 1])
                    have, after_ws = True, False
                    i = j + 1
                elif c in ws:
                    if cur or have:
                        fields.append("".join(cur))
                        cur, have = [], False
                        after_ws = True
                    i += 1
                elif c in other:
                    if not after_ws or cur or have:
                        fields.append("".join(cur))
                    cur, have, after_ws = [], False, False
                    i += 1
                else:
                    j = i + 1
                    while j < n and text[j] not in ifs and text[j] != _PH:
                        j += 1
                    cur.append(text[i:j])
                    have, after_ws = True, False
                    i = j
            if len(fields) > MAX_ITEMS:
                raise _err(f"A command in the script expands to more than {MAX_ITEMS:,} words; planner stops reading it.")
        if cur or have:
            fields.append("".join(cur))
        return fields

    # running --------------------------------------------------------------------------------
    def run(self, node) -> int | None:
        self.st.step()
        if isinstance(node, Seq):
            for item in node.items:
                self.status = self.run(item)
            return self.status
        if isinstance(node, Simple):
            self.status = self.run_simple(node)
            return self.status
        self.st.enter("compound commands")
        try:
            return self._run_compound(node)
        finally:
            self.st.leave()

    def _undecided(self, node, what: str) -> None:
        self.st.note(f"line {node.line}: {what}")

    def _run_compound(self, node) -> int | None:
        if isinstance(node, AndOr):
            status = self.run(node.items[0][1])
            for op, item in node.items[1:]:
                if status is None:
                    self._undecided(item, "a command after '&&'/'||' depends on an undecidable one: skipped")
                    return None
                if (op == "&&") == (status == 0):
                    status = self.run(item)
            return status
        if isinstance(node, Pipe):
            status = 0
            for cmd in node.cmds:
                status = self._subshell(lambda c=cmd: self.run(c)) if len(node.cmds) > 1 else self.run(cmd)
            if node.negate:
                return None if status is None else int(status == 0)
            return status
        if isinstance(node, If):
            for cond, body in node.clauses:
                status = self.run(cond)
                if status is None:
                    self._undecided(node, f"'if {getattr(cond, 'snippet', '')}' depends on something planner cannot "
                                          "decide (an unknown value or a file test): none of its branches is read")
                    return 0
                if status == 0:
                    return self.run(body)
            return self.run(node.else_) if node.else_ else 0
        if isinstance(node, ForBody):
            return self._run_for(node)
        if isinstance(node, CFor):
            return self._run_cfor(node)
        if isinstance(node, While):
            return self._run_while(node)
        if isinstance(node, Case):
            return self._run_case(node)
        if isinstance(node, Group):
            if node.subshell:
                return self._subshell(lambda: self.run(node.body))
            return self.run(node.body)
        if isinstance(node, ArithCmd):
            v = self.arith_text(self.expand_text(node.expr, bash=True), True, node.line)
            return None if v is None else int(v == 0)
        if isinstance(node, CondCmd):
            return self._run_cond(node)
        if isinstance(node, FuncDef):
            self.funcs[node.name] = node.body
            return 0
        raise AssertionError(type(node))

    def _subshell(self, fn) -> int | None:
        saved = ({k: (list(v) if isinstance(v, list) else v) for k, v in self.vars.items()},
                 set(self.exported), list(self.positional), dict(self.funcs))
        try:
            return fn()
        except _Exit as exc:
            return exc.status
        finally:
            self.vars, self.exported, self.positional, self.funcs = saved

    def _loop(self, node, items, body_fn) -> int | None:
        status: int | None = 0
        for item, _ in zip(items, self._loop_guard(node)):  # items first: no note when they run out
            status, stop = self._pass(status, body_fn, item)
            if stop:
                break
        return status

    @staticmethod
    def _pass(status: int | None, body, arg) -> tuple[int | None, bool]:
        """One pass of a loop's body, ``body(arg)``, for every kind of loop: (the loop's status
        after it, whether the loop stops). ``break N`` / ``continue N`` with N > 1 end this loop and act on the
        enclosing one (raised again with N - 1); a pass ended by either keeps the status before it."""
        try:
            return body(arg), False
        except _Break as exc:
            if exc.n > 1:
                raise _Break(exc.n - 1) from None
            return status, True
        except _Continue as exc:
            if exc.n > 1:
                raise _Continue(exc.n - 1) from None
            return status, False

    def _run_for(self, node: ForBody) -> int | None:
        if node.var == "\x00select":
            self._undecided(node, "'select' reads the terminal: skipped")
            return 0
        if node.words is None:
            items = list(self.positional)
        else:
            items = [f for w in node.words for f in self.expand(w, bash=True)]
        if any(self.st.opaque(x) for x in items):
            self._undecided(node, "the 'for' loop runs over a value planner does not know "
                                  f"({', '.join(self.st.render(x) for x in items if self.st.opaque(x))[:120]}): skipped")
            return 0

        def body(item):
            self.set_scalar(node.var, item)
            return self.run(node.body)

        return self._loop(node, items, body)

    def _counter(self):
        k = 0
        while True:
            yield k
            k += 1

    def _run_cfor(self, node: CFor) -> int | None:
        if self.arith_text(self.expand_text(node.init, bash=True), True, node.line) is None and node.init.parts:
            self._undecided(node, "the 'for ((...))' loop starts from an unknown value: skipped")
            return 0
        status: int | None = 0
        for _ in self._loop_guard(node):
            c = self.arith_text(self.expand_text(node.cond, bash=True), True, node.line) if node.cond.parts else 1
            if c is None:
                self._undecided(node, "the 'for ((...))' loop tests an unknown value: stopped")
                break
            if c == 0:
                break
            status, stop = self._pass(status, self.run, node.body)
            if stop:
                break
            self.arith_text(self.expand_text(node.step, bash=True), True, node.line)
        return status

    def _loop_guard(self, node):
        for k in self._counter():
            if k >= MAX_LOOP:
                self.st.note(f"line {node.line}: the loop stopped after {MAX_LOOP:,} iterations (planner reads no further)")
                return
            self.st.step()
            yield k

    def _run_while(self, node: While) -> int | None:
        status: int | None = 0
        for _ in self._loop_guard(node):
            c = self.run(node.cond)
            if c is None:
                self._undecided(node, f"'{'until' if node.until else 'while'} {getattr(node.cond, 'snippet', '')}' "
                                      "tests something planner cannot decide: the loop is not read further")
                break
            if (c == 0) == node.until:
                break
            status, stop = self._pass(status, self.run, node.body)
            if stop:
                break
        return status

    def _run_case(self, node: Case) -> int | None:
        word = self.expand_text(node.word, bash=True)
        if _PH in word:
            self._undecided(node, f"'case {self.st.render(word)}' depends on a value planner does not know: skipped")
            return 0
        falling = False
        for pats, body, term in node.items:
            hit = falling
            if not hit:
                for pw in pats:
                    toks = self._pattern(pw, True)
                    if toks is None:
                        self._undecided(node, "a 'case' pattern depends on a value planner does not know: skipped")
                        return 0
                    if glob_match(toks, word, self.st):
                        hit = True
                        break
            if hit:
                status = self.run(body)
                if term == ";&":
                    falling = True
                    continue
                if term == ";;&":
                    falling = False
                    continue
                return status
        return 0

    # [[ ]] and test ---------------------------------------------------------------------------
    def _run_cond(self, node: CondCmd) -> int | None:
        """``[[ expression ]]``: status 0 when true, 1 when false, None when planner cannot decide."""
        return _CondEval(self, node).status()

    def _unary_test(self, op: str, arg: str) -> bool | None:
        if _PH in arg:
            return None
        if op == "-z":
            return arg == ""
        if op == "-n":
            return arg != ""
        if op == "-v":
            return arg in self.vars
        return None  # file tests (-f, -d, -e, ...), -o, -t: the file system is not looked at

    def _binary_test(self, op: str, a: str, b: str, arith: bool = False) -> bool | None:
        if _PH in a or _PH in b:
            return None
        if op in ("=", "=="):
            return a == b
        if op == "!=":
            return a != b
        if op == "<":
            return a < b
        if op == ">":
            return a > b
        if op in ("-eq", "-ne", "-lt", "-le", "-gt", "-ge"):
            if arith:
                x, y = self.arith_text(a, True), self.arith_text(b, True)
                if x is None or y is None:
                    return None
            else:
                try:
                    x, y = _int_operand(a), _int_operand(b)
                except ValueError:
                    return False  # bash: "integer expression expected", status 2
            return {"-eq": x == y, "-ne": x != y, "-lt": x < y, "-le": x <= y, "-gt": x > y, "-ge": x >= y}[op]
        return None  # -nt, -ot, -ef: files

    def _test(self, args: list[str]) -> int | None:
        """The [ / test builtin, by argument count as POSIX specifies."""
        if any(self.st.opaque(a) for a in args):
            return None

        def one(a):
            return a != ""

        def two(a, b):
            if a == "!":
                return not one(b)
            if a in _UNARY_TESTS:
                return self._unary_test(a, b)
            return False  # error: status 2

        def three(a, b, c):
            if b in _BINARY_TESTS:
                return self._binary_test(b, a, c)
            if b in ("-a", "-o"):
                return (one(a) and one(c)) if b == "-a" else (one(a) or one(c))
            if a == "!":
                v = two(b, c)
                return None if v is None else not v
            if a == "(" and c == ")":
                return one(b)
            return False

        n = len(args)
        v: bool | None  # None: depends on something planner cannot know
        if n == 0:
            v = False
        elif n == 1:
            v = one(args[0])
        elif n == 2:
            v = two(*args)
        elif n == 3:
            v = three(*args)
        elif n == 4 and args[0] == "!":
            v = three(*args[1:])
            v = None if v is None else not v
        elif n == 4 and args[0] == "(" and args[3] == ")":
            v = two(args[1], args[2])
        else:
            v = self._test_general(args)
        return None if v is None else (0 if v else 1)

    def _test_general(self, args: list[str]) -> bool | None:
        pos = [0]

        def factor():
            neg = False
            while pos[0] < len(args) and args[pos[0]] == "!":
                neg = not neg
                pos[0] += 1
            if pos[0] >= len(args):
                return False
            a = args[pos[0]]
            if a == "(":
                pos[0] += 1
                self.st.enter("test")
                try:
                    v = expr()
                finally:
                    self.st.leave()
                pos[0] += 1
            elif a in _UNARY_TESTS and pos[0] + 1 < len(args):
                v = self._unary_test(a, args[pos[0] + 1])
                pos[0] += 2
            elif pos[0] + 2 < len(args) and args[pos[0] + 1] in _BINARY_TESTS:
                v = self._binary_test(args[pos[0] + 1], a, args[pos[0] + 2])
                pos[0] += 3
            else:
                v = a != ""
                pos[0] += 1
            return _not3(v) if neg else v

        def chain(operand, op, absorbing):
            v = operand()
            while pos[0] < len(args) and args[pos[0]] == op:
                pos[0] += 1
                v = _combine3(v, operand(), absorbing)
            return v

        def term():
            return chain(factor, "-a", False)

        def expr():
            return chain(term, "-o", True)

        return expr()

    # simple commands --------------------------------------------------------------------------
    def _assign(self, a, bash: bool = False) -> None:
        name, index, append, value = a
        if value.parts and value.parts[-1][0] == "array" and len(value.parts) == 1:
            items = [f for w in value.parts[0][1] for f in self.expand(w, bash)]
            self.set_array(name, items, append)
            return
        text = self.expand_text(value, bash)
        if index is not None:
            idx = self.arith_text(self.expand_text(index, bash=True), True)
            if idx is None:
                self.st.note(f"an assignment to {name}[...] uses an unknown index: skipped")
                return
            self.set_element(name, idx, text, append)
        else:
            self.set_scalar(name, text, append)

    def run_simple(self, node: Simple) -> int | None:
        if not node.words:
            for a in node.assigns:
                self._assign(a)
            return 0
        head = _literal(node.words[0])
        if head in ("export", "declare", "typeset", "local", "readonly"):
            return self._declare(head, node)
        # [ and test decide: their operands are read as bash has them (unset variables empty)
        bash = head in ("[", "test")
        fields = [f for w in node.words for f in self.expand(w, bash)]
        prefix = {}
        for a in node.assigns:
            name, index, append, value = a
            prefix[name] = self.expand_text(value)
        return self.dispatch(fields, prefix, node)

    def dispatch(self, fields: list[str], prefix: dict[str, str], node: Simple) -> int | None:
        if not fields:
            for k, v in prefix.items():
                self.set_scalar(k, v)
            return 0
        name = fields[0]
        args = fields[1:]
        if name in self.funcs:
            return self._call(name, args, node)
        handler = _BUILTINS.get(name)
        if handler is not None:
            return handler(self, args, node, prefix)
        return self._external(fields, prefix, node)

    def _call(self, name: str, args: list[str], node: Simple) -> int | None:
        self.st.enter("function calls")
        saved_pos = self.positional
        self.positional = list(args)
        self.locals.append({})
        try:
            return self.run(self.funcs[name])
        except _Return as exc:
            return exc.status
        finally:
            frame = self.locals.pop()
            for k, old in frame.items():
                if old is None:
                    self.vars.pop(k, None)
                else:
                    self.vars[k] = old
            self.positional = saved_pos
            self.st.leave()

    def _env(self, prefix: dict[str, str]) -> dict[str, str]:
        env = {}
        for k in sorted(self.exported):
            v = self.vars.get(k)
            if isinstance(v, str):
                env[k] = self.st.render(v)
        env.update({k: self.st.render(v) for k, v in prefix.items()})
        return env

    def _external(self, fields: list[str], prefix: dict[str, str], node: Simple) -> int | None:
        base = fields[0].rsplit("/", 1)[-1]
        if base == "env":
            k = 1
            while k < len(fields) and (fields[k].startswith("-") or "=" in fields[k]):
                if "=" in fields[k] and not fields[k].startswith("-"):
                    key, _, val = fields[k].partition("=")
                    prefix = {**prefix, key: val}
                k += 1
            return self.dispatch(fields[k:], prefix, node) if k < len(fields) else 0
        if base in ("nohup", "command", "builtin", "time", "nice", "stdbuf") and len(fields) > 1:
            rest = fields[1:]
            while base in ("nice", "stdbuf") and rest and rest[0].startswith("-"):
                rest = rest[1:]
            if rest and rest[0] == "-v" and base == "command":
                return 0
            return self.dispatch(rest, prefix, node) if rest else 0
        self.st.commands.append(Command([self.st.render(f) for f in fields], [_PH in f for f in fields],
                                        self._env(prefix), node.line, self.where))
        self._nested_scripts(fields, prefix, node)
        return 0

    def _nested_scripts(self, fields: list[str], prefix: dict[str, str], node: Simple) -> None:
        """bash -c STRING, here-documents and here-strings fed to a shell or to sbatch, sbatch --wrap.
        The words are scanned through wrappers (srun, mpirun, numactl, ...) up to the program."""
        for k, w in enumerate(fields):
            if w.startswith("-") or "=" in w and k > 0:
                continue
            base = w.rsplit("/", 1)[-1]
            if base.startswith("python") or base in ("torchrun",) or base.endswith(".py"):
                return
            if base in _SHELLS:
                j, has_c = k + 1, False
                while j < len(fields) and fields[j][:1] in "-+" and fields[j] not in ("-", "--"):
                    opt = fields[j]
                    if not opt.startswith("--") and "c" in opt[1:]:
                        has_c = True
                    j += 2 if opt in ("-o", "+o", "-O", "+O") else 1
                if j < len(fields) and fields[j] == "--":
                    j += 1
                if has_c and j < len(fields):
                    self._child(fields[j], fields[j + 2:], prefix, node, f"{base} -c at line {node.line}",
                                name=fields[j + 1] if j + 1 < len(fields) else base)
                    return
                if j < len(fields):
                    self.st.note(f"line {node.line}: runs the script {self.st.render(fields[j])}, which planner does "
                                 "not read")
                    return
                self._stdin_script(node, prefix, base)
                return
            if base == "sbatch":
                for j in range(k + 1, len(fields)):
                    if fields[j].startswith("--wrap="):
                        self._child(fields[j][7:], [], prefix, node, f"sbatch --wrap at line {node.line}")
                        return
                    if fields[j] == "--wrap" and j + 1 < len(fields):
                        self._child(fields[j + 1], [], prefix, node, f"sbatch --wrap at line {node.line}")
                        return
                self._stdin_script(node, prefix, base)
                return

    def _stdin_script(self, node: Simple, prefix: dict[str, str], base: str) -> None:
        for op, target, doc in node.redirs:
            if doc is not None and doc["body"] is not None:
                self._child(self.expand_text(doc["body"]), [], prefix, node,
                            f"the here-document fed to {base} at line {node.line}", line0=doc["line"])
                return
            if op == "<<<" and target is not None:
                self._child(self.expand_text(target), [], prefix, node, f"the here-string fed to {base} at line {node.line}")
                return

    def _child(self, text: str, args: list[str], prefix: dict[str, str], node: Simple, where: str,
               name: str = "bash", line0: int = 0) -> None:
        """A nested shell: it sees exported variables and the command's prefixes only."""
        env = {}
        for k in self.exported:
            v = self.vars.get(k)
            if isinstance(v, str):
                env[k] = v
        env.update(prefix)
        child = Shell(self.st, environ=env, args=args, name=name, where=where if not self.where else f"{where}, {self.where}")
        self.st.enter("nested shells")
        try:
            child.run_text(text, line0)
        except (_Exit, _Break, _Continue, _Return):
            pass
        except ScriptStop as exc:
            self.st.note(f"{where}: {exc.message}")
        finally:
            self.st.leave()

    def _declare(self, head: str, node: Simple) -> int | None:
        export = head == "export"
        local = head == "local" or (head in ("declare", "typeset") and bool(self.locals))
        is_array: bool | str = False  # or "unsupported": -A / -n
        for w in node.words[1:]:
            a = _assignment(w)
            if a is None:
                for opt in self.expand(w):
                    if opt.startswith(("-", "+")) and len(opt) > 1:
                        on = opt[0] == "-"
                        if "x" in opt[1:]:
                            export = on
                        if "a" in opt[1:]:
                            is_array = on
                        if ("A" in opt[1:] or "n" in opt[1:]) and on:
                            self.st.note(f"line {node.line}: '{head} {opt}' (associative arrays, name references) "
                                         "is not modeled; those variables read as unknown")
                            is_array = "unsupported"
                        if "g" in opt[1:]:
                            local = False
                        continue
                    if _is_name(opt):
                        self._local(opt, local)
                        if is_array == "unsupported":
                            self.unsupported.add(opt)
                        elif is_array and opt not in self.vars:
                            self.vars[opt] = []
                        if export:
                            self.exported.add(opt)
                        elif head == "export" and opt.startswith("-n"):
                            self.exported.discard(opt)
                continue
            name = a[0]
            self._local(name, local)
            if is_array == "unsupported":
                self.unsupported.add(name)
                continue
            if is_array and not (a[3].parts and a[3].parts[0][0] == "array"):
                self.set_element(name, 0, self.expand_text(a[3]))
            else:
                self._assign(a)
            if export:
                self.exported.add(name)
        return 0

    def _local(self, name: str, local: bool) -> None:
        if local and self.locals and name not in self.locals[-1]:
            old = self.vars.get(name)
            self.locals[-1][name] = list(old) if isinstance(old, list) else old


_UNARY_TESTS = {"-z", "-n", "-v", "-e", "-f", "-d", "-r", "-w", "-x", "-s", "-L", "-h", "-p", "-S", "-b", "-c",
                "-t", "-o", "-g", "-u", "-k", "-O", "-G", "-N", "-a"}
_BINARY_TESTS = {"=", "==", "!=", "<", ">", "-eq", "-ne", "-lt", "-le", "-gt", "-ge", "-nt", "-ot", "-ef"}


def _not3(v: bool | None) -> bool | None:
    return None if v is None else not v


def _combine3(a: bool | None, b: bool | None, absorbing: bool) -> bool | None:
    """Three-valued and (absorbing False) / or (absorbing True): unknown only when it matters."""
    if a is absorbing or b is absorbing:
        return absorbing
    return None if a is None or b is None else not absorbing


class _CondEval:
    """One ``[[ expression ]]`` evaluated over its tokens, three-valued (None: planner cannot decide).
    Follows bash's manual, "Conditional Constructs": ``( expr )`` binds tightest, then ``!``, then
    ``&&``, then ``||``; ``&&`` and ``||`` do not evaluate an operand that cannot change the result;
    ``==``/``=``/``!=`` match the right side as a pattern; no word splitting or globbing of operands."""

    def __init__(self, sh: Shell, node: CondCmd):
        self.sh, self.toks, self.line, self.pos = sh, node.tokens, node.line, 0

    def peek(self):
        return self.toks[self.pos] if self.pos < len(self.toks) else ("end", None)

    def status(self) -> int | None:
        v = self.or_expr()
        if self.pos != len(self.toks):
            raise _err(f"Line {self.line} of the script: unexpected token inside '[[ ]]' (bash syntax error).")
        if v is None:
            return None
        return 0 if v else 1

    def or_expr(self) -> bool | None:
        return self.chain(self.and_expr, "||", True)

    def and_expr(self) -> bool | None:
        return self.chain(self.not_expr, "&&", False)

    def chain(self, operand, op: str, absorbing: bool) -> bool | None:
        """operand (op operand)*: three-valued and/or, skipping what bash short-circuits."""
        v = operand()
        while self.peek() == ("op", op):
            self.pos += 1
            if v is absorbing:
                self.skip_operand()
            else:
                v = _combine3(v, operand(), absorbing)
        return v

    def skip_operand(self) -> None:
        """Steps over an operand bash does not evaluate: up to the next ``&&``/``||`` outside parentheses
        or the ``)`` that closes the enclosing group."""
        depth = 0
        while self.pos < len(self.toks):
            t = self.toks[self.pos]
            if t == ("op", "("):
                depth += 1
            elif t == ("op", ")"):
                if depth == 0:
                    return
                depth -= 1
            elif depth == 0 and t in (("op", "&&"), ("op", "||")):
                return
            self.pos += 1

    def not_expr(self) -> bool | None:
        """``! expr`` negates; each further ``!`` negates again."""
        neg = False
        while self.peek()[0] == "w" and self.peek()[1].parts == [("lit", "!")]:
            self.pos += 1
            neg = not neg
        return _not3(self.primary()) if neg else self.primary()

    def primary(self) -> bool | None:
        t = self.peek()
        if t == ("op", "("):
            return self.group()
        if t[0] != "w":
            raise _err(f"Line {self.line} of the script: unexpected '{t[1]}' inside '[[ ]]' (bash syntax error).")
        self.pos += 1
        first = self.sh.expand_text(t[1], bash=True)  # expanded even when it is the unary operator itself
        nxt = self.peek()
        lit = _literal(t[1])
        if lit in _UNARY_TESTS and t[1].parts[0][0] == "lit" and nxt[0] == "w":
            self.pos += 1
            return self.sh._unary_test(lit, self.sh.expand_text(nxt[1], bash=True))
        op = _cond_binary_op(nxt)
        if op is None:  # a lone word: true when it expands to a non-empty string
            return None if _PH in first else first != ""
        self.pos += 1
        rhs = self.peek()
        self.pos += 1
        return self.binary(op, first, rhs)

    def group(self) -> bool | None:
        """``( expression )``: the value of expression."""
        self.pos += 1
        self.sh.st.enter("[[ ]]")
        try:
            v = self.or_expr()
        finally:
            self.sh.st.leave()
        if self.peek() != ("op", ")"):
            raise _err(f"Line {self.line} of the script: '(' inside '[[ ]]' is never closed (bash syntax error).")
        self.pos += 1
        return v

    def binary(self, op: str, first: str, rhs) -> bool | None:
        """``first op rhs``: ``=~`` (a regular expression) is not decided; ``==``/``=``/``!=`` match rhs as a
        pattern (quoted parts literally); the others compare strings or, for ``-eq`` and kin, arithmetic."""
        if op == "=~":
            return None
        if rhs[0] != "w":
            raise _err(f"Line {self.line} of the script: '{op}' inside '[[ ]]' needs a right operand.")
        if op in ("==", "=", "!="):
            pattern = self.sh._pattern(rhs[1], True)
            if pattern is None or _PH in first:
                return None
            hit = glob_match(pattern, first, self.sh.st)
            return hit if op != "!=" else not hit
        second = self.sh.expand_text(rhs[1], bash=True)
        return self.sh._binary_test(op, first, second, arith=True)


def _cond_binary_op(tok) -> str | None:
    """The binary operator a ``[[ ]]`` token spells: ``<``, ``>`` and ``=~`` come as operator tokens,
    the others (``==``, ``-eq``, ``-nt``, ...) as plain words."""
    if tok[0] == "op" and tok[1] in ("<", ">", "=~"):
        return tok[1]
    if tok[0] == "w" and _literal(tok[1]) in _BINARY_TESTS:
        return _literal(tok[1])
    return None


def _int_operand(text: str) -> int:
    t = text.strip()
    if not t or not (t.lstrip("+-").isdigit()) or len(t) > 20:
        raise ValueError(text)
    return _wrap(int(t))


# ---------------------------------------------------------------------------------------------
# builtins
# ---------------------------------------------------------------------------------------------


def _b_true(sh, args, node, prefix):
    return 0


def _b_false(sh, args, node, prefix):
    return 1


def _b_bracket(sh, args, node, prefix):
    if not args or args[-1] != "]":
        return 2  # bash: "[: missing ']'"
    return sh._test([sh.st.strip_unset(a) for a in args[:-1]])


def _b_test(sh, args, node, prefix):
    return sh._test([sh.st.strip_unset(a) for a in args])


def _b_exit(sh, args, node, prefix):
    status = sh.status
    if args:
        try:
            status = _int_operand(args[0]) & 255
        except ValueError:
            status = 2
    raise _Exit(status, node.line)


def _b_return(sh, args, node, prefix):
    if not sh.locals:
        return _b_exit(sh, args, node, prefix)
    try:
        status = _int_operand(args[0]) & 255 if args else sh.status
    except ValueError:
        status = 2
    raise _Return(status)


def _b_break(sh, args, node, prefix):
    n = _int_operand(args[0]) if args and args[0].isdigit() else 1
    raise (_Break if _literal(node.words[0]) == "break" else _Continue)(max(n, 1))


def _b_unset(sh, args, node, prefix):
    funcs = "-f" in args
    for a in args:
        if a.startswith("-"):
            continue
        if funcs:
            sh.funcs.pop(a, None)
            continue
        if "[" in a and a.endswith("]"):
            name, _, sub = a[:-1].partition("[")
            arr = sh.vars.get(name)
            idx = sh.arith_text(sub, True)
            if isinstance(arr, list) and idx is not None and 0 <= idx < len(arr):
                arr[idx] = None
            continue
        sh.vars.pop(a, None)
        sh.exported.discard(a)
    return 0


def _b_set(sh, args, node, prefix):
    k = 0
    while k < len(args):
        a = args[k]
        if a == "--":
            sh.positional = list(args[k + 1:])
            return 0
        if a in ("-o", "+o"):
            k += 2
            continue
        if a[:1] in "-+" and len(a) > 1:
            k += 1
            continue
        sh.positional = list(args[k:])
        return 0
    return 0


def _b_shift(sh, args, node, prefix):
    n = _int_operand(args[0]) if args else 1
    if n > len(sh.positional):
        return 1
    sh.positional = sh.positional[n:]
    return 0


def _b_eval(sh, args, node, prefix):
    text = " ".join(args)
    if not text.strip():
        return 0
    sh.st.enter("eval")
    try:
        sub = _Parser(text, sh.st, node.line - 1)
        try:
            tree = sub.parse_program()
        except ScriptStop as exc:
            sh.st.note(f"line {node.line}: eval: {exc.message}")
            return 2
        sh.assigned |= sub.assigned
        return sh.run(tree)
    finally:
        sh.st.leave()


def _b_source(sh, args, node, prefix):
    what = sh.st.render(args[0]) if args else "nothing"
    sh.st.note(f"line {node.line}: sources {what}, which planner does not read (what it sets stays unknown)")
    return 0


def _b_let(sh, args, node, prefix):
    v = None
    for a in args:
        v = sh.arith_text(a, True, node.line)
    return None if v is None else int(v == 0)


def _b_read(sh, args, node, prefix):
    names, arr, k = [], None, 0
    while k < len(args):
        a = args[k]
        if a.startswith("-") and "a" in a[1:] and k + 1 < len(args):
            arr = args[k + 1]
            k += 2
            continue
        if a in ("-d", "-p", "-t", "-n", "-N", "-u", "-i") and k + 1 < len(args):
            k += 2
            continue
        if a.startswith("-"):
            k += 1
            continue
        names.append(a)
        k += 1
    text = None
    for op, target, doc in node.redirs:
        if op == "<<<" and target is not None:
            text = sh.expand_text(target)
        elif doc is not None and doc["body"] is not None:
            text = sh.expand_text(doc["body"])
    targets = ([arr] if arr else []) + names
    if text is None or _PH in text:
        for t in targets or ["REPLY"]:
            if _is_name(t):
                sh.set_scalar(t, sh.st.ph("opaque", f"(read {t})"))
        return 0 if text is not None else None
    line = text.split("\n", 1)[0]
    saved = sh.vars.get("IFS")
    if "IFS" in prefix:
        sh.vars["IFS"] = prefix["IFS"]
    try:
        fields = sh._split([(line, True, False)], False)
    finally:
        if saved is None:
            sh.vars.pop("IFS", None)
        else:
            sh.vars["IFS"] = saved
    if arr:
        sh.set_array(arr, fields)
        return 0
    names = names or ["REPLY"]
    for k, name in enumerate(names):
        if k == len(names) - 1:
            sh.set_scalar(name, " ".join(fields[k:]))
        else:
            sh.set_scalar(name, fields[k] if k < len(fields) else "")
    return 0


def _b_printf(sh, args, node, prefix):
    target = None
    if len(args) >= 2 and args[0] == "-v":
        target, args = args[1], args[2:]
    if args and args[0] == "--":
        args = args[1:]
    if not args:
        return 2
    fmt, rest = args[0], args[1:]
    try:
        text = _printf(fmt, rest, sh)
    except ValueError as exc:
        raise _err(f"Line {node.line} of the script: printf {exc}.") from None
    if target is not None:
        if "[" in target and target.endswith("]"):
            name, _, sub = target[:-1].partition("[")
            idx = sh.arith_text(sub, True)
            if idx is not None:
                sh.set_element(name, idx, text)
        elif _is_name(target):
            sh.set_scalar(target, text)
    return 0


def _backtick_body(text: str) -> str:
    """The command inside `...`: a backslash before $, ` or \\ is removed (bash's manual,
    Command Substitution); any other backslash stays."""
    out, i, n = [], 0, len(text)
    while i < n:
        if text[i] == "\\" and i + 1 < n and text[i + 1] in "$`\\":
            out.append(text[i + 1])
            i += 2
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def _builtin_output(fields: list[str], sh: Shell) -> str | None:
    """What ``echo`` or ``printf`` (fields after expansion) writes to standard output, or None
    where planner does not follow it (``echo -e``, whose escapes differ from printf's; a bad
    printf format)."""
    name, args = fields[0], fields[1:]
    if name == "printf":
        if args and args[0] == "-v":
            return None  # prints nothing; what it sets is another command's to print (rare: not followed)
        if args and args[0] == "--":
            args = args[1:]
        if not args:
            return None
        try:
            return _printf(args[0], args[1:], sh)
        except ValueError:
            return None
    if name != "echo":
        return None
    newline = True
    while args and len(args[0]) > 1 and args[0][0] == "-" and all(c in "neE" for c in args[0][1:]):
        if "e" in args[0]:
            return None
        newline = newline and "n" not in args[0]
        args = args[1:]
    return " ".join(args) + ("\n" if newline else "")


def _b_exec(sh, args, node, prefix):
    if not args:
        return 0
    status = sh.dispatch(args, prefix, node)
    raise _Exit(status, node.line)


_BUILTINS = {
    ":": _b_true, "true": _b_true, "false": _b_false, "[": _b_bracket, "test": _b_test,
    "exit": _b_exit, "return": _b_return, "break": _b_break, "continue": _b_break, "unset": _b_unset,
    "set": _b_set, "shift": _b_shift, "eval": _b_eval, "source": _b_source, ".": _b_source, "let": _b_let,
    "read": _b_read, "printf": _b_printf, "exec": _b_exec,
    "echo": _b_true, "cd": _b_true, "pushd": _b_true, "popd": _b_true, "shopt": _b_true, "trap": _b_true,
    "wait": _b_true, "umask": _b_true, "ulimit": _b_true, "alias": _b_true, "unalias": _b_true,
    "hash": _b_true, "type": _b_true, "sleep": _b_true, "mapfile": _b_true, "readarray": _b_true,
    "getopts": lambda sh, a, n, p: None,
}


_PRINTF_ESCAPES = {"n": "\n", "t": "\t", "\\": "\\", '"': '"', "'": "'", "a": "\a", "r": "\r", "e": "\x1b"}
"""The backslash escapes of printf's format this reader turns into characters (bash's manual, "Bash
Builtins", printf: the format's escapes are those of echo -e); any other backslash is kept as written."""


def _printf(fmt: str, args: list[str], sh: Shell) -> str:
    """printf's format language: %s %b %q %c %d %i %u %x %X %o %e %f %g %%, flags, width, precision;
    the format is reused while arguments remain (bash's manual, printf: "The format is reused as
    necessary to consume all of the arguments"); a pass that uses none ends it."""
    out: list[str] = []
    k = 0
    while True:
        used_before = k
        k = _printf_pass(fmt, args, k, sh, out)
        _check_len("".join(out))
        if k == used_before or k >= len(args):
            break
    return _check_len("".join(out))


def _printf_pass(fmt: str, args: list[str], k: int, sh: Shell, out: list[str]) -> int:
    """One pass over the format from argument ``k``, appending to ``out``; returns the next argument's index."""
    i, n = 0, len(fmt)
    while i < n:
        if fmt[i] == "\\":
            d = fmt[i + 1] if i + 1 < n else ""  # a backslash that ends the format is printed, as bash does
            out.append(_PRINTF_ESCAPES.get(d, "\\"))
            i += 2 if d in _PRINTF_ESCAPES else 1
        elif fmt[i] != "%":
            j = _printf_literal_end(fmt, i)
            out.append(fmt[i:j])
            i = j
        elif fmt.startswith("%%", i):
            out.append("%")
            i += 2
        else:
            flags, width, prec, i, k = _printf_spec(fmt, i, args, k)
            conv = fmt[i]
            i += 1
            arg = args[k] if k < len(args) else None
            k += 1 if conv in "sbqcdiuxXoeEfgG" else 0
            spec = "%" + flags + width + ("." + prec if prec is not None else "")
            out.append(_printf_convert(conv, spec, bool(width or prec), arg, fmt, sh))
            # an unknown %c/number argument is not counted here (as before the split): the pass's length check bounds it
            if len(out) > MAX_ITEMS and not (conv in "cdiuxXoeEfgG" and arg is not None and _PH in arg):
                raise ValueError("output is too long")
    return k


def _printf_literal_end(fmt: str, i: int) -> int:
    """Where the plain text from ``fmt[i]`` (neither ``%`` nor a backslash) ends: at the next ``%`` or backslash."""
    j = i
    while j < len(fmt) and fmt[j] not in "%\\":
        j += 1
    return j


def _printf_spec(fmt: str, i: int, args: list[str], k: int) -> tuple[str, str, str | None, int, int]:
    """The directive at ``fmt[i] == "%"``: flags (``-+ #0``), width and precision (digits or ``*``, which
    takes an argument), as bash's printf reads them. Returns (flags, width, precision or None, the index
    of the conversion character, the next argument). A width or precision over MAX_PRINTF_WIDTH is refused."""
    j = i + 1
    flags = ""
    while j < len(fmt) and fmt[j] in "-+ #0":
        flags += fmt[j]
        j += 1
    width, j, k = _printf_number(fmt, j, args, k)
    prec = None
    if j < len(fmt) and fmt[j] == ".":
        prec, j, k = _printf_number(fmt, j + 1, args, k)
    if j >= len(fmt):
        raise ValueError(f"'{fmt[i:]}': missing format character")
    for num in (width, prec):
        if num and (not num.lstrip("-").isdigit() or abs(int(num[:8])) > MAX_PRINTF_WIDTH or len(num) > 8):
            raise ValueError(f"width or precision '{num}' is beyond {MAX_PRINTF_WIDTH}")
    return flags, width, prec, j, k


def _printf_convert(conv: str, spec: str, sized: bool, arg: str | None, fmt: str, sh: Shell) -> str:
    """One conversion of ``arg`` (None: none left, which bash reads as "" or 0) by ``spec`` + ``conv``."""
    if conv in "sbq":
        return _printf_text(conv, spec, sized, arg or "", fmt, sh)
    if conv not in "cdiuxXoeEfgG":
        raise ValueError(f"'%{conv}': invalid format character")
    if arg is not None and _PH in arg:  # a value planner does not know cannot be formatted
        return sh.st.ph("opaque", "printf " + sh.st.render(fmt))
    if conv == "c":  # the first character of the argument
        return (spec + "s") % (arg or "")[:1]
    if conv in "diuxXo":
        return _printf_integer(conv, spec, arg)
    return _printf_float(conv, spec, arg)


def _printf_text(conv: str, spec: str, sized: bool, text: str, fmt: str, sh: Shell) -> str:
    """%s as is; %b expands backslash escapes in the argument (only \\n, \\t and \\\\ here); %q quotes it
    so the shell reads it back (single quotes unless every character is safe bare). An unknown value
    passes through unless a width or precision would cut or pad it."""
    if conv == "b":
        text = text.replace("\\n", "\n").replace("\\t", "\t").replace("\\\\", "\\")
    if conv == "q":
        text = sh.st.render(text)
        text = text if text and all(ch in _NAME_CHARS + "-./=:,+@%" for ch in text) else "'" + text.replace("'", "'\\''") + "'"
    if _PH in text and sized:
        return sh.st.ph("opaque", "printf " + sh.st.render(fmt))
    return text if _PH in text else (spec + "s") % text


def _printf_integer(conv: str, spec: str, arg: str | None) -> str:
    """%d %i %u %x %X %o: the argument read as bash reads a printf number (_printf_int); %u %x %X %o print
    a negative value as its unsigned 64-bit value, as bash does."""
    v = _printf_int(arg)
    if conv in "uxXo" and v < 0:
        v += 1 << 64
    return (spec + ("d" if conv in "diu" else conv)) % v


def _printf_float(conv: str, spec: str, arg: str | None) -> str:
    """%e %E %f %g %G: the argument as a floating-point number (none or "" reads as 0)."""
    try:
        fv = float(arg) if arg else 0.0
    except ValueError:
        raise ValueError(f"'{arg}': invalid number") from None
    return (spec + conv) % fv


def _printf_number(fmt: str, j: int, args: list[str], k: int) -> tuple[str, int, int]:
    """A width or a precision at ``fmt[j]``: ``*`` takes the next argument (``"0"`` when none is
    left), else the digits there ("" when none). Returns it with where the format and the
    arguments go on."""
    if j < len(fmt) and fmt[j] == "*":
        return (args[k] if k < len(args) else "0"), j + 1, k + 1
    start = j
    while j < len(fmt) and fmt[j] in _DIGITS:
        j += 1
    return fmt[start:j], j, k


def _printf_int(arg: str | None) -> int:
    if arg is None or arg == "":
        return 0
    t = arg.strip()
    if t[:1] in "'\"" and len(t) > 1:
        return ord(t[1])
    sign = -1 if t.startswith("-") else 1
    body = t.lstrip("+-")
    try:
        if body.lower().startswith("0x"):
            v = int(body[2:18], 16) if len(body) <= 18 else None
        elif body.startswith("0") and len(body) > 1:
            v = int(body[:23], 8) if len(body) <= 23 else None
        else:
            v = int(body) if body.isdigit() and len(body) <= 19 else None
    except ValueError:
        v = None
    if v is None:
        raise ValueError(f"'{arg}': invalid number")
    return _wrap(sign * v)


# ---------------------------------------------------------------------------------------------
# entry point
# ---------------------------------------------------------------------------------------------


def run_script(text: str, *, environ: Mapping[str, str] | None = None, args: Sequence[str] = (),
               name: str = "script") -> ShellRun:
    """Read ``text`` as bash would run it with ``environ`` exported and ``args`` as $1, $2, ...;
    nothing is executed. Raises PlannerError on a bash syntax error or a limit."""
    if len(text) > MAX_SCRIPT_CHARS:
        raise _err(f"The script is {len(text):,} characters long; planner reads launch scripts up to "
                   f"{MAX_SCRIPT_CHARS:,}.")
    if _PH in text:
        raise _err("The script contains a NUL character, which bash drops and planner refuses.")
    text = text.replace("\r\n", "\n")
    st = _State()
    sh = Shell(st, environ=environ, args=args, name=name)
    exit_at, stop = None, None
    try:
        sh.run_text(text)
    except _Exit as exc:
        exit_at = (exc.line, exc.status)
    except (_Break, _Continue):
        pass
    except _Return as exc:
        exit_at = (0, exc.status)
    except ScriptStop as exc:
        stop = exc
    except RecursionError:
        raise _err("The script nests too deeply for planner to read.") from None
    return ShellRun(st.commands, list(st.unresolved), list(st.not_run), list(st.notes), exit_at, stop)
