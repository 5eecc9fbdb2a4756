"""Grades exercises/ch08_r1.py (or solutions/ with --target solutions)."""

import math
import re
from fractions import Fraction

import pytest
from grading import call, fail, load_chapter, raised
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from minirl.metrics import pass_at_k as minirl_pass_at_k
from minirl.rewards import extract_solution
from minirl.rewards import think_format as minirl_think_format


@pytest.fixture(scope="module")
def ch(request):
    return load_chapter(request.config, "ch08_r1")


# Every fuzz test sees the same 300 strings on every run (derandomize): a grade does not change between runs.
FUZZ = settings(max_examples=300, deadline=None, derandomize=True, database=None, report_multiple_bugs=False,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.large_base_example])

# The pieces the two parsers care about, and their near misses: tags, hashes, digits and number marks,
# whitespace of several kinds, a NUL, non-ASCII letters and an Arabic-Indic digit (which \d matches, [0-9] not).
PIECES = ["<think>", "</think>", "<think>", "</think>", "####", "#### ", "#### ", "#", "<", ">", "/", "think",
          "0", "1", "7", "42", "9,000", "3.5", "-", ",", ".", "$", " ", "  ", "\n", "\t", "\r", "\x00", "\u00a0",
          "\u3000", "é", "٣", "x", "+", "="]
pieces = st.lists(st.sampled_from(PIECES), max_size=24).map("".join)
whitespace = st.text(alphabet=" \t\n\r\x0b\x0c\x85\u00a0\u3000", max_size=3)
number = st.one_of(st.from_regex(r"-?[0-9][0-9,.]{0,5}", fullmatch=True), pieces)
hashes = st.sampled_from(["#### ", "#### ", "#### ", "####", "####  ", "##### ", "### ", "#### $", "#### -"])
thinking = st.one_of(st.text(alphabet="0123456789+=, \n", max_size=20), pieces)
# Responses close to the format, "<think>...</think> #### N", with something changed here and there.
near_format = st.builds(lambda lead, body, gap, marks, answer, tail: lead + "<think>" + body + "</think>" + gap +
                        marks + answer + tail, whitespace, thinking, whitespace, hashes, number,
                        st.one_of(whitespace, pieces))
# Responses in the format, with their whitespace, thinking and numbers varied.
in_format = st.builds(lambda lead, body, gap, answer, tail: lead + "<think>" + body + "</think>" + gap + "#### " +
                      answer + tail, whitespace, st.text(alphabet="0123456789+=, \n\tx", max_size=20), whitespace,
                      st.from_regex(r"-?[0-9][0-9,.]{0,5}", fullmatch=True), whitespace)


# Long responses, with the 300 characters that verl searches starting anywhere in the head, often inside an answer.
@st.composite
def clipped_responses(draw):
    head, tail = draw(st.one_of(in_format, near_format, pieces)), draw(st.one_of(st.just(""), whitespace, pieces))
    cut = draw(st.integers(0, len(head)))  # the tail of 300 characters starts at head[cut] ...
    if "####" in head and draw(st.booleans()):  # ... or near the head's last "####"
        cut = min(len(head), max(0, head.rfind("####") + draw(st.integers(-1, 8))))
    return head + "x" * max(0, 300 - len(tail) - (len(head) - cut)) + tail


RESPONSES = st.one_of(st.text(max_size=60), pieces, in_format, near_format, clipped_responses())

ODD_STRINGS = ["", " ", "\n\n", "\x00", "<think>", "</think>", "<think></think>", "####", "#### ", "#### -",
               "<think>\x00</think>#### 1\x00", "\ud800", "<think>" * 50, "#### " * 100, "é" * 400, "#" * 301]


def show(s: str) -> str:
    """A response, readably: whole if short, else its start, its end and its length."""
    return repr(s) if len(s) <= 120 else f"{s[:30]!r} ... {s[-70:]!r} ({len(s)} characters)"


# ----------------------------------------------------------------------------------------------
# 8.1 think_format
# ----------------------------------------------------------------------------------------------


def fmt(ch, s: str) -> float:
    """Call the reader's think_format; check that it returned 1.0 or 0.0."""
    out = call(ch.think_format, s)
    if isinstance(out, bool) or not isinstance(out, float):
        fail(f"think_format({show(s)}) returned {type(out).__name__} {out!r}: return the float 1.0 or 0.0 (a reward "
             "is a number; not a bool, a re.Match or None).")
    if out not in (0.0, 1.0):
        fail(f"think_format({show(s)}) returned {out!r}: the format reward is 1.0 or 0.0, nothing in between.")
    return out


def why_think(s: str) -> str:
    """Why minirl's think_format scores `s` as it does, in a sentence."""
    t = s.strip()
    if not t.startswith("<think>"):
        before = " (here text comes before it)" if "<think>" in t else ""
        return f"after stripping whitespace the response must START with <think>{before}."
    end = t.find("</think>", len("<think>"))
    if end < 0:
        return "the <think> block is never closed by </think>."
    inner, rest = t[len("<think>") : end], t[end + len("</think>") :]
    if "<think>" in inner:
        return "the think block holds a nested <think>: the block ends at the first </think>, and no tag may come " \
               "before it."
    if not re.fullmatch(r"\s*#### -?[0-9][0-9,.]*\s*", rest):
        if "<think>" in rest or "</think>" in rest:
            return "a second tag follows the first </think>: exactly one think block (a greedy <think>.*</think> " \
                   "swallows two; use a lazy .*? and check the block for stray tags)."
        return f"after the first </think> comes {rest!r}, which is not optional whitespace, then '#### ' (one " \
               "space), a number -?[0-9][0-9,.]* and nothing else."
    return "it is one <think> block, then optional whitespace, '#### ' and a number, and nothing else: the format."


def hint_think(s: str, got: float) -> str:
    """A hint for the classic mistakes behind a wrong verdict on `s`, or ''."""
    t = s.strip()
    if got == 0.0:
        if "\n" in t.split("</think>")[0]:
            return " The thinking holds a line break: in a regex, '.' matches a newline only with re.DOTALL."
        if any(c.isspace() and c not in " \t\n" for c in s):
            return " The string holds whitespace other than ' ', tab and newline (e.g. '\\r', '\\x85', '\\u3000'): " \
                   "str.strip() and \\s know them all."
    elif any(c.isdecimal() and not "0" <= c <= "9" for c in s):
        return " It holds a digit outside [0-9]: in Python 3, \\d matches other scripts' digits too; use [0-9]."
    return ""


@pytest.mark.exercise("8.1", "think_format")
def test_think_format_accepts_the_format(ch):
    good = {
        "<think>7+5=12, 12+8=20</think> #### 20": "the chain task's answer in the R1 format",
        "<think>7+5=12</think>#### 12": "no whitespace between </think> and '####' is fine (optional whitespace)",
        "<think>\n7+5=12\n12+8=20\n</think>\n#### 20": "the thinking spans several lines: in a regex, '.' matches a "
                                                      "newline only with re.DOTALL",
        "  \n<think>a</think> #### 3\n\n": "whitespace around the whole response is stripped first",
        "<think></think> #### 3": "an empty think block is still one think block",
        "<think>so</think> #### -4": "a negative answer: -?[0-9][0-9,.]*",
        "<think>so</think> #### 1,234.5": "commas and dots may follow the first digit: -?[0-9][0-9,.]*",
        "<think>so</think>\t \n#### 20.": "'#### 20.' matches -?[0-9][0-9,.]* (the dot is allowed after a digit)",
    }
    for s, why in good.items():
        if fmt(ch, s) != 1.0:
            fail(f"think_format({s!r}) returned 0.0, expected 1.0: {why}.")


@pytest.mark.exercise("8.1", "think_format")
def test_think_format_wants_exactly_one_think_block(ch):
    bad = {
        "<think>a</think><think>b</think> #### 5": "two think blocks",
        "<think>a</think> <think>b</think>\n#### 5": "two think blocks",
        "<think>a<think>b</think> #### 5": "a nested <think> inside the block",
        "<think>a</think>b</think> #### 5": "a stray </think> after the block",
        "<think>a</think> #### 5 <think>b</think>": "a second think block after the answer",
    }
    for s, what in bad.items():
        if fmt(ch, s) != 0.0:
            fail(f"think_format({s!r}) returned 1.0 for {what}: R1's format is exactly ONE <think>...</think> block. "
                 "A greedy <think>.*</think> swallows two blocks and everything between them; use a lazy .*? and "
                 "reject the response if the block holds another <think> or </think>.")


@pytest.mark.exercise("8.1", "think_format")
def test_think_format_wants_the_answer_and_nothing_else(ch):
    bad = {
        "<think>7+5=12</think> 12": "the '#### ' before the answer is missing",
        "<think>7+5=12</think> ####12": "'####' must be followed by exactly one space",
        "<think>7+5=12</think> ####  12": "'####' must be followed by exactly one space, then '-' or a digit",
        "<think>7+5=12</think> #### $12": "after '#### ' comes '-' or a digit, not '$'",
        "<think>7+5=12</think> #### ": "there is no number after '#### '",
        "<think>7+5=12</think> #### twelve": "the answer must be a number: -?[0-9][0-9,.]*",
        "<think>7+5=12</think> #### ١٢": "those are Arabic-Indic digits: use [0-9], since \\d also matches other "
                                         "scripts' digits in Python 3",
        "<think>7+5=12</think> #### 12 because 7+5=12": "text after the answer",
        "<think>7+5=12</think> #### 12\n#### 13": "a second answer after the first",
        "Sure! <think>7+5=12</think> #### 12": "text before <think>: the response must START with <think>",
        "#### 12": "there is no think block",
        "<think>7+5=12 #### 12": "the think block is never closed",
        "<THINK>7+5=12</THINK> #### 12": "the tags are lower-case <think> and </think>",
        "<think>7+5=12</think> The answer is 12.": "the answer is not in the '#### N' format",
    }
    for s, why in bad.items():
        if fmt(ch, s) != 0.0:
            fail(f"think_format({s!r}) returned 1.0, expected 0.0: {why}.")


@pytest.mark.exercise("8.1", "think_format")
def test_think_format_never_raises(ch):
    for s in ODD_STRINGS:
        got = fmt(ch, s)  # fails, naming the exception, if the reader's function raises
        if got != minirl_think_format(s):
            fail(f"think_format({show(s)}) returned {got}; expected {minirl_think_format(s)}: {why_think(s)}"
                 f"{hint_think(s, got)}")


@pytest.mark.exercise("8.1", "think_format")
@FUZZ
@given(s=RESPONSES)
def test_think_format_agrees_with_minirl_on_any_string(ch, s):
    got, want = fmt(ch, s), minirl_think_format(s)
    if got != want:
        fail(f"think_format({show(s)}) returned {got}, minirl's think_format returns {want}: {why_think(s)}"
             f"{hint_think(s, got)} (a failing string found by hypothesis, shrunk)")


# ----------------------------------------------------------------------------------------------
# 8.2 extract_answer
# ----------------------------------------------------------------------------------------------

STRICT = r"#### (\-?[0-9\.\,]+)"


def answer(ch, s: str):
    """Call the reader's extract_answer; check that it returned a string or None."""
    out = call(ch.extract_answer, s)
    if out is not None and not isinstance(out, str):
        fail(f"extract_answer({show(s)}) returned {type(out).__name__} {out!r}: return the answer as a STRING, as "
             "verl does (the scorer compares strings), or None when there is no answer.")
    return out


def why_extract(s: str, got) -> str:
    """A hint for a wrong answer: the classic mistake that gives exactly `got`, if there is one."""

    def clean(found):
        return found.replace(",", "").replace("$", "") if found is not None else None

    tail = s[-300:]
    every, in_tail = re.findall(STRICT, s), re.findall(STRICT, tail)
    longer, shorter = re.findall(STRICT, s[-301:]), re.findall(STRICT, s[-299:]) if len(s) > 299 else []
    mistakes = [
        (clean(longer[-1]) if longer else None, "you searched more than the last 300 characters (the whole response, "
                                                "or one character too many): verl searches solution_str[-300:]."),
        (clean(every[-1]) if every else None, "you searched the whole response; verl searches only its last 300 "
                                              "characters (solution_str[-300:])."),
        (clean(shorter[-1]) if shorter else None, "you searched fewer than the last 300 characters: verl searches "
                                                  "solution_str[-300:]."),
        (clean(in_tail[0]) if in_tail else None, "you took the FIRST answer; verl takes the LAST one "
                                                 "(re.findall(...)[-1])."),
        (in_tail[-1] if in_tail else None, "remove the commas (and '$') from the answer, as verl does: "
                                           "'1,000' -> '1000'."),
    ]
    want = extract_solution(s, method="strict")
    for wrong, hint in mistakes:
        if wrong is not None and wrong == got and wrong != want:
            return hint
    if want is None:
        return "the last 300 characters hold no match of '#### (\\-?[0-9\\.\\,]+)', so there is no answer: None."
    return f"the last match of '#### (\\-?[0-9\\.\\,]+)' in the last 300 characters is {in_tail[-1]!r}, which " \
           f"gives {want!r} once ',' and '$' are removed."


def expect_answer(ch, s: str, why: str = ""):
    got, want = answer(ch, s), extract_solution(s, method="strict")
    if got != want:
        fail(f"extract_answer({show(s)}) returned {got!r}, verl returns {want!r}: {why or why_extract(s, got)}")


@pytest.mark.exercise("8.2", "extract_answer")
def test_extract_answer_toy(ch):
    s = "Natalia sold 48/2 = 24 clips in May.\nNatalia sold 48+24 = 72 clips altogether in April and May.\n#### 72"
    got = answer(ch, s)
    if got == 72 or got == 72.0:
        fail("return the answer as the string '72', not a number: verl compares it with the ground truth as strings.")
    expect_answer(ch, s)
    expect_answer(ch, "<think>7+5=12, 12+8=20</think> #### 20")
    expect_answer(ch, "I think the answer is 20.", "there is no '#### ', so there is no answer: return None "
                                                    "(the scorer then gives 0, as for a wrong answer).")
    expect_answer(ch, "", "an empty response has no answer: None.")


@pytest.mark.exercise("8.2", "extract_answer")
def test_extract_answer_takes_the_last_answer(ch):
    expect_answer(ch, "<think>7+5=12</think> #### 12\nWait, I forgot the 8: 12+8=20.\n#### 20",
                  "two answers: verl takes the LAST one (re.findall(...)[-1]); re.search finds the first.")
    expect_answer(ch, "#### 1#### 2#### 3", "three answers in a row: the last one, '3', wins.")


@pytest.mark.exercise("8.2", "extract_answer")
def test_extract_answer_reads_only_the_last_300_characters(ch):
    expect_answer(ch, "#### 11 " + "z" * 400,
                  "the answer sits more than 300 characters before the end, so verl does not see it: None. Only "
                  "the last 300 characters are searched (solution_str[-300:]).")
    expect_answer(ch, "#### 1\n" + "y" * 400 + "\n#### 2", "only the second answer lies in the last 300 characters.")
    expect_answer(ch, "#### 5" + "w" * 294,
                  "the response is exactly 300 characters long, so all of it is searched and '#### 5' is seen. "
                  "Is your tail one character short (solution_str[-299:])?")
    expect_answer(ch, "#### 5" + "w" * 295,
                  "the response is 301 characters long: the tail is solution_str[-300:], which starts at '### 5' "
                  "(one '#' cut off), so there is no match: None.")
    expect_answer(ch, "#### 12345" + "w" * 295,
                  "the last 300 characters start at '12345': the '#### ' was cut off, so there is no match: None.")


@pytest.mark.exercise("8.2", "extract_answer")
def test_extract_answer_cleans_the_string_as_verl_does(ch):
    cases = {
        "#### 1,000": "thousands commas are removed: '1000'",
        "#### -1,234.50": "commas go, the sign and the decimals stay: '-1234.50'",
        "#### 42.": "the regex takes the sentence's final dot too, and verl keeps it: '42.' (a string matcher, not "
                    "a number parser)",
        "#### 007": "the answer is a string, not a number: leading zeros stay, '007'",
        "#### $5": "after '#### ' the regex wants '-', a digit, '.' or ',': '$5' is no match, so None (the '$' "
                   "removal never fires)",
        "#### 5$": "the regex stops before '$': '5'",
        "####5": "'####' must be followed by a space: None",
        "####  5": "'####' must be followed by exactly one space, then the number: None",
        "#### ,": "the loose regex -?[0-9.,]+ matches a lone ','; with the comma removed the answer is '' (an empty "
                  "string, not None)",
    }
    for s, why in cases.items():
        expect_answer(ch, s, why + ".")


@pytest.mark.exercise("8.2", "extract_answer")
def test_extract_answer_never_raises(ch):
    for s in ODD_STRINGS:
        expect_answer(ch, s)


@pytest.mark.exercise("8.2", "extract_answer")
@FUZZ
@given(s=RESPONSES)
def test_extract_answer_agrees_with_verl_on_any_string(ch, s):
    got, want = answer(ch, s), extract_solution(s, method="strict")
    if got != want:
        fail(f"extract_answer({show(s)}) returned {got!r}, verl's extract_solution(method='strict') returns {want!r}: "
             f"{why_extract(s, got)} (a failing string found by hypothesis, shrunk)")


# ----------------------------------------------------------------------------------------------
# 8.3 pass_at_k
# ----------------------------------------------------------------------------------------------


def exact_pass_at_k(n: int, c: int, k: int) -> float:
    """1 - C(n - c, k) / C(n, k), in exact arithmetic (math.comb(m, k) is 0 when k > m)."""
    return float(1 - Fraction(math.comb(n - c, k), math.comb(n, k)))


def pak(ch, n: int, c: int, k: int) -> float:
    """Call the reader's pass_at_k; check that it returned a float in [0, 1]."""
    out = call(ch.pass_at_k, n, c, k)
    if isinstance(out, bool) or not isinstance(out, float):
        fail(f"pass_at_k(n={n}, c={c}, k={k}) returned {type(out).__name__} {out!r}: return a Python float.")
    if not (math.isfinite(out) and 0.0 <= out <= 1.0):
        fail(f"pass_at_k(n={n}, c={c}, k={k}) returned {out!r}: a probability is a finite number in [0, 1]. With "
             "large n, do not build the binomials as floats: multiply the factors (1 - k / i) instead.")
    return out


def why_pass_at_k(n: int, c: int, k: int, got: float) -> str:
    """A hint for a wrong pass@k: the classic mistake that gives exactly `got`, if there is one."""
    want = exact_pass_at_k(n, c, k)
    mistakes = [
        (1 - (1 - c / n) ** k, "that is 1 - (1 - c/n)^k, k draws WITH replacement. pass@k draws k of the n answers "
                               "without replacement: 1 - C(n - c, k) / C(n, k)."),
        (c / n, "that is c/n, the accuracy: it ignores k. pass@k = 1 - C(n - c, k) / C(n, k)."),
        (math.comb(c, k) / math.comb(n, k), "that is the chance that ALL k draws are right. pass@k is the chance "
                                            "that at least one is: 1 - C(n - c, k) / C(n, k)."),
        (1 - math.comb(n - c, k) / math.comb(n, k) if n - c >= k else 0.0,
         "when n - c < k, every k-subset holds a right answer: pass@k = 1.0."),
    ]
    for wrong, hint in mistakes:
        if abs(wrong - got) <= 1e-9 and abs(wrong - want) > 1e-9:
            return hint
    return f"1 - C({n - c}, {k}) / C({n}, {k}) = {want!r}."


def expect_pass_at_k(ch, n: int, c: int, k: int):
    got, want = pak(ch, n, c, k), minirl_pass_at_k(n, c, k)
    if abs(got - want) > 1e-9:
        fail(f"pass_at_k(n={n}, c={c}, k={k}) returned {got!r}, expected {want!r}: {why_pass_at_k(n, c, k, got)}")


@pytest.mark.exercise("8.3", "pass_at_k")
def test_pass_at_k_small_cases(ch):
    for n in range(1, 9):
        for c in range(n + 1):
            for k in range(1, n + 1):
                got, want = pak(ch, n, c, k), exact_pass_at_k(n, c, k)
                if abs(got - want) > 1e-9:
                    fail(f"pass_at_k(n={n}, c={c}, k={k}) returned {got!r}, expected {want!r}: "
                         f"{why_pass_at_k(n, c, k, got)}")


@pytest.mark.exercise("8.3", "pass_at_k")
def test_pass_at_k_special_values(ch):
    for n, c in ((10, 3), (64, 17), (200, 1)):
        got = pak(ch, n, c, 1)
        if abs(got - c / n) > 1e-9:
            fail(f"pass_at_k(n={n}, c={c}, k=1) returned {got!r}: with k = 1 pass@k is the plain accuracy c/n = "
                 f"{c / n!r}.")
    for n, k in ((10, 1), (10, 10), (64, 8)):
        if pak(ch, n, 0, k) != 0.0:
            fail(f"pass_at_k(n={n}, c=0, k={k}) should be exactly 0.0: with no right answer no draw can hit one.")
        if abs(pak(ch, n, n, k) - 1.0) > 1e-12:
            fail(f"pass_at_k(n={n}, c={n}, k={k}) should be 1.0: every answer is right.")
    for n, c, k in ((5, 3, 3), (10, 8, 5), (64, 60, 8)):
        got = pak(ch, n, c, k)
        if got != 1.0:
            fail(f"pass_at_k(n={n}, c={c}, k={k}) returned {got!r}: only n - c = {n - c} answers are wrong, fewer "
                 f"than k = {k}, so every choice of k answers holds a right one: exactly 1.0.")


@pytest.mark.exercise("8.3", "pass_at_k")
def test_pass_at_k_large_n(ch):
    for n, c, k in ((2000, 3, 500), (2000, 1, 1), (2000, 1000, 1000), (10000, 5000, 5000), (200, 7, 100)):
        error = raised(ch.pass_at_k, n, c, k)
        if isinstance(error, OverflowError):
            fail(f"pass_at_k(n={n}, c={c}, k={k}) raised OverflowError ({error}): C({n}, {k}) has "
                 f"{len(str(math.comb(n, k)))} digits, too many for a float. Do not build the binomials: multiply "
                 "the c factors (1 - k / i) for i = n - c + 1, ..., n.")
        expect_pass_at_k(ch, n, c, k)


@pytest.mark.exercise("8.3", "pass_at_k")
def test_pass_at_k_rejects_bad_arguments(ch):
    for n, c, k, why in ((0, 0, 1, "n = 0: no samples"), (5, 6, 1, "c > n"), (5, -1, 1, "a negative c"),
                         (5, 2, 0, "k = 0"), (5, 2, 6, "k > n: cannot draw 6 of 5 answers without replacement")):
        error = raised(ch.pass_at_k, n, c, k)
        if error is None:
            fail(f"pass_at_k(n={n}, c={c}, k={k}) was accepted ({why}). Raise a ValueError unless n >= 1, "
                 "0 <= c <= n and 1 <= k <= n: a nonsense argument must not become a number in a report.")
        if not isinstance(error, ValueError):
            fail(f"pass_at_k(n={n}, c={c}, k={k}) ({why}): raise a ValueError, not {type(error).__name__} ({error}).")
    for n, c, k in ((1, 0, 1), (1, 1, 1), (5, 5, 5), (5, 0, 5)):
        error = raised(ch.pass_at_k, n, c, k)
        if error is not None:
            fail(f"pass_at_k(n={n}, c={c}, k={k}) is valid (n >= 1, 0 <= c <= n, 1 <= k <= n), but your pass_at_k "
                 f"raised {type(error).__name__}: {error}.")


@st.composite
def counts(draw):
    n = draw(st.integers(1, 300))
    return n, draw(st.integers(0, n)), draw(st.integers(1, n))


@pytest.mark.exercise("8.3", "pass_at_k")
@FUZZ
@given(nck=counts())
def test_pass_at_k_agrees_with_minirl(ch, nck):
    n, c, k = nck
    got, want = pak(ch, n, c, k), exact_pass_at_k(n, c, k)
    if abs(got - want) > 1e-9 or abs(got - minirl_pass_at_k(n, c, k)) > 1e-9:
        fail(f"pass_at_k(n={n}, c={c}, k={k}) returned {got!r}, expected {want!r}: {why_pass_at_k(n, c, k, got)} "
             "(a failing case found by hypothesis, shrunk)")
