#!/usr/bin/env python3
"""No function in the project longer than 150 lines (issue 16; STYLE.md §9 keeps stages small).

Scope: every .cpp, .hpp, .cu and .cuh file that git tracks in the repository (library sources,
headers, tests, benches, the CUDA backend); without git (a source tarball) every such file
under the root except build*/ folders. A "function" is any body that starts at namespace,
class or file scope: free and member functions, constructors, operators, Catch2 TEST_CASEs
and lambdas assigned at namespace scope. Lambdas and local classes inside a function count as
lines of the function that holds them.

Length = lines from the first line of the declaration (template line included) to the closing
brace, both inclusive; blank and comment lines count (they are lines a reader reads).

The scanner is a small C++ tokenizer, not a parser: it drops comments, string and character
literals (raw strings R"d(...)d" and u8/L/u/U prefixes included), digit separators (1'000) and
preprocessor lines, then follows the braces. A brace at class or namespace scope opens a
function body when its declaration has parentheses at top level and does not start with
class/struct/union/enum/namespace; brace initialisers in a constructor's member-initialiser
list (a_{x}) and braces inside parentheses are skipped.

Usage: check-function-length.py [ROOT] [--max N] [--list]   (exit 1 when a function is too long)
       check-function-length.py --self-test
"""
import os
import subprocess
import sys

MAX_LINES = 150

# Functions allowed to stay longer than the limit for now: (path, name) -> why. Keep it empty;
# an entry is a debt with a reason and an owner, and a stale entry is reported.
ALLOWLIST: dict = {}

CLASS_KEYS = {"class", "struct", "union", "enum", "namespace"}
SKIP_PREFIX = {"inline", "export", "typedef"}
ACCESS = {"public", "private", "protected"}


def skip_comment(text, i, line):
    """The index after the comment at text[i] (a line comment stops before its newline) and the
    line number there."""
    if text.startswith("//", i):
        end = text.find("\n", i)
        return (len(text) if end < 0 else end), line
    end = text.find("*/", i + 2)
    end = len(text) if end < 0 else end + 2
    return end, line + text.count("\n", i, end)


def tokenize(text):
    """Yields (kind, value, line): kind 'id', 'num', 'str' or 'p' (punctuation)."""
    i, n, line = 0, len(text), 1
    at_line_start = True
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
            i += 1
            at_line_start = True
            continue
        if c in " \t\r\f\v":
            i += 1
            continue
        if c == "#" and at_line_start:  # preprocessor line, with continuations and comments
            while i < n and text[i] != "\n":
                if text[i] == "\\" and i + 1 < n and text[i + 1] == "\n":
                    line += 1
                    i += 2
                    continue
                if text.startswith("/*", i) or text.startswith("//", i):
                    i, line = skip_comment(text, i, line)
                    continue
                i += 1
            continue
        at_line_start = False
        if text.startswith("/*", i) or text.startswith("//", i):
            i, line = skip_comment(text, i, line)
            continue
        if c.isalpha() or c == "_":
            j = i
            while j < n and (text[j].isalnum() or text[j] == "_"):
                j += 1
            word = text[i:j]
            if j < n and text[j] == '"' and word in ("R", "u8R", "LR", "uR", "UR"):
                open_paren = text.find("(", j + 1)
                delim = text[j + 1:open_paren]
                close = text.find(")" + delim + '"', open_paren + 1)
                end = n if close < 0 else close + len(delim) + 2
                yield ("str", text[open_paren + 1:close][:60], line)
                line += text.count("\n", i, end)
                i = end
                continue
            if j < n and text[j] in "\"'" and word in ("u8", "L", "u", "U"):
                i = j  # the literal follows; the prefix is part of it
                continue
            yield ("id", word, line)
            i = j
            continue
        if c.isdigit() or (c == "." and i + 1 < n and text[i + 1].isdigit()):
            j = i + 1
            while j < n:
                if text[j].isalnum() or text[j] in "._'":
                    j += 1
                elif text[j] in "+-" and text[j - 1] in "eEpP":
                    j += 1
                else:
                    break
            yield ("num", text[i:j], line)
            i = j
            continue
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                if text[j] == "\\":
                    j += 1
                elif text[j] == "\n":  # unterminated: stop at the line end
                    break
                j += 1
            yield ("str", text[i + 1:j][:60], line)
            i = j + 1
            continue
        if text.startswith("::", i) or text.startswith("->", i):
            yield ("p", text[i:i + 2], line)
            i += 2
            continue
        yield ("p", c, line)
        i += 1


def strip_template_prefix(head):
    """The head without leading `template <...>` clauses (angle brackets balanced)."""
    k = 0
    while k < len(head) and head[k][1] == "template" and k + 1 < len(head) and head[k + 1][1] == "<":
        depth, k = 0, k + 1
        while k < len(head):
            v = head[k][1]
            if v == "<":
                depth += 1
            elif v == ">":
                depth -= 1
                if depth == 0:
                    k += 1
                    break
            k += 1
    return head[k:]


def classify(head):
    """'function', 'container' (namespace/class body) or 'data' for a brace at container scope."""
    body = strip_template_prefix(head)
    while body and body[0][1] in SKIP_PREFIX:
        body = body[1:]
    if body and body[0][1] == "extern":
        return "container" if len(body) == 1 or body[1][0] == "str" and len(body) == 2 else "function"
    if body and body[0][1] in CLASS_KEYS:
        return "container"
    depth = 0
    for kind, v, _ in body:
        if v in "([":
            if v == "(" and depth == 0:
                return "function"
            depth += 1
        elif v in ")]":
            depth -= 1
    return "data"


def function_name(head):
    head = strip_template_prefix(head)
    depth, prev = 0, None
    for idx, (kind, v, _) in enumerate(head):
        if v == "(" and depth == 0:
            if prev is None:
                break
            if prev[1] in ("TEST_CASE", "TEMPLATE_TEST_CASE", "SCENARIO") and idx + 1 < len(head) and head[idx + 1][0] == "str":
                return f'{prev[1]}("{head[idx + 1][1]}")'
            if prev[1] == "]":
                return "lambda"
            # operator(), operator<, ...: name from the `operator` token on
            for back in range(idx - 1, max(-1, idx - 4), -1):
                if head[back][1] == "operator":
                    return "operator" + "".join(t[1] for t in head[back + 1:idx])
            # qualified name: A::B::f
            parts, k = [prev[1]], idx - 2
            while k >= 1 and head[k][1] == "::" and head[k - 1][0] == "id":
                parts.insert(0, head[k - 1][1])
                k -= 2
            return "::".join(parts)
        if v in "([<":
            depth += 1 if v != "<" else 0
        elif v in ")]":
            depth -= 1
        prev = (kind, v)
    return "?"


def in_init_list(head):
    """True when the head is a constructor with a member-initialiser list (`) : a_(x), b_`)."""
    depth, seen_params = 0, False
    for kind, v, _ in strip_template_prefix(head):
        if v in "([":
            depth += 1
        elif v in ")]":
            depth -= 1
            if depth == 0:
                seen_params = True
        elif v == ":" and depth == 0 and seen_params:
            return True
    return False


def functions(text):
    """[(name, first_line, last_line)] of the bodies that start at container scope."""
    toks = list(tokenize(text))
    out = []
    head = []
    i, n = 0, len(toks)
    scopes = []  # 'container' per open container brace

    def skip_braces(k):  # toks[k] is '{'; returns the index after its matching '}'
        depth = 0
        while k < n:
            if toks[k][1] == "{" and toks[k][0] == "p":
                depth += 1
            elif toks[k][1] == "}" and toks[k][0] == "p":
                depth -= 1
                if depth == 0:
                    return k + 1
            k += 1
        return k

    while i < n:
        kind, v, line = toks[i]
        if kind != "p":
            head.append(toks[i])
            i += 1
            continue
        if v == ";":
            head = []
        elif v == ":" and len(head) == 1 and head[0][1] in ACCESS:
            head = []
        elif v == "}":
            if scopes:
                scopes.pop()
            head = []
        elif v == "{":
            paren = sum(1 if t[1] in "([" else -1 if t[1] in ")]" else 0 for t in head if t[0] == "p")
            if paren > 0:  # a brace inside parentheses: part of the declaration
                end = skip_braces(i)
                head.append(("p", "}", toks[end - 1][2]))
                i = end
                continue
            what = classify(head)
            if what == "function" and in_init_list(head) and head and (head[-1][0] == "id" or head[-1][1] == ">"):
                end = skip_braces(i)  # a_{x} in the member-initialiser list
                head.append(("p", "}", toks[end - 1][2]))
                i = end
                continue
            if what == "container":
                scopes.append("container")
                head = []
            elif what == "function":
                end = skip_braces(i)
                first = head[0][2] if head else line
                out.append((function_name(head), first, toks[end - 1][2]))
                head = []
                i = end
                continue
            else:  # data: an initialiser; keep scanning after it
                end = skip_braces(i)
                head.append(("p", "}", toks[end - 1][2]))
                i = end
                continue
        else:
            head.append(toks[i])
        i += 1
    return out


def tracked_sources(root):
    exts = (".cpp", ".hpp", ".cu", ".cuh")
    try:
        files = subprocess.run(["git", "-C", root, "ls-files", "-z"], check=True, capture_output=True).stdout.decode().split("\0")
        return sorted(f for f in files if f.endswith(exts) and os.path.isfile(os.path.join(root, f)))
    except (OSError, subprocess.CalledProcessError):
        found = []
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = [d for d in dirnames if not d.startswith((".", "build"))]
            found += [os.path.relpath(os.path.join(dirpath, f), root) for f in filenames if f.endswith(exts)]
        return sorted(found)


def check(root, max_lines, list_all):
    too_long, allowed, seen_allowed = [], [], set()
    files = tracked_sources(root)
    total = 0
    for rel in files:
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as fh:
            text = fh.read()
        for name, first, last in functions(text):
            total += 1
            length = last - first + 1
            if list_all:
                print(f"{length:5d} {rel}:{first} {name}")
            if length > max_lines:
                if (rel, name) in ALLOWLIST:
                    allowed.append((rel, first, name, length))
                    seen_allowed.add((rel, name))
                else:
                    too_long.append((rel, first, name, length))
    for rel, first, name, length in allowed:
        print(f"allowed for now: {rel}:{first}: {name} has {length} lines — {ALLOWLIST[(rel, name)]}")
    for key in sorted(set(ALLOWLIST) - seen_allowed):
        print(f"note: allowlist entry {key[0]}: {key[1]} is no longer longer than {max_lines} lines; remove it")
    for rel, first, name, length in too_long:
        print(f"error: {rel}:{first}: {name} has {length} lines (at most {max_lines}) — split it into named helpers")
    print(f"{total} functions in {len(files)} files; {len(too_long)} longer than {max_lines} lines")
    return 1 if too_long else 0


def self_test():
    body = "\n".join(f"  x += {k};" for k in range(148))
    cases = [
        # (source, expected [(name, first, last)])
        ("void f() {\n" + body + "\n}\n", [("f", 1, 150)]),
        ("// a } in a comment { {\nint g(int a) {\n  /* } */ return a; // }\n}\n", [("g", 2, 4)]),
        ('auto s() {\n  const char* x = "}}{";\n  char c = \'}\';\n  return R"d(})}"{)d";\n}\n', [("s", 1, 5)]),
        ('const char* r = R"(\n{\n)";\nvoid h() {}\n', [("h", 4, 4)]),
        ("int n = 1'000'000;\nvoid k() {\n  auto l = [&](int a) { if (a) { return; } };\n}\n", [("k", 2, 4)]),
        ("namespace a::b {\nstruct S : T {\n  S(int v) : v_{v}, w_(v) {\n  }\n  int v_{0};\n  "
         "bool operator<(const S& o) const { return v_ < o.v_; }\n};\n}  // namespace\n",
         [("S", 3, 4), ("operator<", 6, 6)]),
        ("#define M(x) { x }\n#if 0 // {\n#endif\ntemplate <class T>\nT id(T t) {\n  return t;\n}\n", [("id", 4, 7)]),
        ("template <int (*F)(int)>\nint twice(int x) {\n  return F(F(x));\n}\n", [("twice", 1, 4)]),
        ('TEST_CASE("plan: it fits", "[plan]") {\n  SECTION("a") {}\n}\n', [('TEST_CASE("plan: it fits")', 1, 3)]),
        ("const std::map<int, int> kTable = {{1, 2}, {3, 4}};\nstatic auto f = [](int a) {\n  return a;\n};\n",
         [("lambda", 2, 4)]),
        ("int A::B::run(std::vector<int> v = {1, 2}) const noexcept {\n  return 0;\n}\n", [("A::B::run", 1, 3)]),
        ('extern "C" {\nvoid c_api() {\n}\n}\nenum class E : int { a, b };\nauto t() -> std::vector<int> {\n  return {};\n}\n',
         [("c_api", 2, 3), ("t", 6, 8)]),
        ("class C {\n public:\n  void m() {\n  }\n private:\n  int x_ = 0;\n};\n", [("m", 3, 4)]),
    ]
    failed = 0
    for src, want in cases:
        got = functions(src)
        if got != want:
            failed += 1
            print(f"self-test FAILED\n--- source\n{src}--- want {want}\n--- got  {got}")
    print(f"{len(cases) - failed} of {len(cases)} self-test cases pass")
    return 1 if failed else 0


def main(argv):
    if "--self-test" in argv:
        return self_test()
    max_lines = MAX_LINES
    if "--max" in argv:
        max_lines = int(argv[argv.index("--max") + 1])
    args = [a for k, a in enumerate(argv) if not a.startswith("--") and (k == 0 or argv[k - 1] != "--max")]
    root = args[0] if args else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    return check(os.path.abspath(root), max_lines, "--list" in argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
