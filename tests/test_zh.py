"""The Chinese edition (minirl/book/zh.py): every English page has its Chinese page or is listed as pending, the
Chinese nav mirrors the English one, and each Chinese page agrees with its English chapter on the formulas and
the code it cites (verl's and minirl's), shows the chapter's central figure and explains each exercise."""

import json
import re
from pathlib import Path

import pytest
import yaml

from minirl.book import zh

REPO = Path(__file__).resolve().parents[1]
CHAPTERS = REPO / "chapters"
FIVE_ANSWERS = ("问题", "核心公式", "通俗解释", "verl 源码", "下一步")
FORMULA = re.compile(r"\$\$(.+?)\$\$|\$(.+?)\$", re.DOTALL)
CODE_NAME = re.compile(r"`([\w./-]+\.(?:py|sh|md|rst|yaml)(?:::[\w.]+)?|[\w.]+::[\w.]+)`")
EXERCISE_MARK = re.compile(r'@pytest\.mark\.exercise\("([\w.]+)", "(\w+)"\)')
TRANSLATED = [english for english, chinese, status in zh.coverage() if status == "translated"]
CHAPTER_PAGES = [english for english in TRANSLATED if english.endswith(".ipynb")]


def markdown_of(notebook: str) -> str:
    """The Markdown cells of an English notebook, joined."""
    cells = json.loads((CHAPTERS / notebook).read_text())["cells"]
    return "\n\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")


def top_box(text: str) -> str:
    """The table at the top of a chapter (the five answers; a lab's overview)."""
    lines = text.split("\n")
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    return "\n".join(lines[start:end])


def verl_tables(text: str) -> str:
    """The table rows of the chapter's verl section ("## N. verl ↔ minirl"; Chapter 6: "... relative to verl")."""
    match = re.search(r"^## [^\n]*(?:verl ↔ minirl|verl <-> minirl|relative to verl)[^\n]*\n(.*?)(?=^## |\Z)", text,
                      re.MULTILINE | re.DOTALL)
    assert match, "no '## ... verl ...' section"
    return "\n".join(line for line in match.group(1).split("\n") if line.startswith("|"))


def formulas(text: str) -> set[str]:
    return {" ".join((m.group(1) or m.group(2)).split()) for m in FORMULA.finditer(text)}


def code_names(text: str) -> set[str]:
    return set(CODE_NAME.findall(text))


def test_every_english_page_has_its_chinese_page_or_is_pending():
    rows = zh.coverage()
    missing = [english for english, _, status in rows if status == "missing"]
    assert not missing, f"no Chinese page for {missing}: write chapters/<name>.zh.md or list it in zh.PENDING"
    for english in zh.PENDING:
        assert english in zh.english_pages() and not (CHAPTERS / zh.chinese_page(english)).exists(), english
    assert "index.md" in TRANSLATED and CHAPTER_PAGES, "the Chinese reading map and at least one chapter"


def test_the_chinese_nav_mirrors_the_english_nav():
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    languages = next(p["i18n"] for p in config["plugins"] if isinstance(p, dict) and "i18n" in p)["languages"]
    chinese_nav = next(lang for lang in languages if lang["locale"] == zh.LANGUAGE)["nav"]

    def pages(nav):
        for item in nav:
            value = next(iter(item.values())) if isinstance(item, dict) else item
            yield from pages(value) if isinstance(value, list) else [value]

    english, chinese = list(pages(config["nav"])), list(pages(chinese_nav))
    expected = [zh.chinese_page(p) if (CHAPTERS / zh.chinese_page(p)).exists() else p for p in english]
    assert chinese == expected


@pytest.mark.parametrize("notebook", CHAPTER_PAGES)
def test_a_chinese_chapter_page_agrees_with_its_english_chapter(notebook):
    english, chinese = markdown_of(notebook), (CHAPTERS / zh.chinese_page(notebook)).read_text()
    box = re.search(r"^## 五个问题\n(.*?)(?=^## )", chinese, re.MULTILINE | re.DOTALL)
    assert box, "the page needs a '## 五个问题' section with the five answers"
    for answer in FIVE_ANSWERS:
        assert f"| **{answer}** |" in box.group(1), f"the five answers need a row '**{answer}**'"
    # formulas: the English top box's are all there, and every formula on the page is one of the chapter's
    assert formulas(top_box(english)) <= formulas(chinese), formulas(top_box(english)) - formulas(chinese)
    assert formulas(chinese) <= formulas(english), formulas(chinese) - formulas(english)
    # cited code: the top box's and the verl tables' are all there, and nothing the English chapter does not cite
    wanted = code_names(top_box(english)) | code_names(verl_tables(english))
    assert wanted <= code_names(chinese), sorted(wanted - code_names(chinese))
    assert code_names(chinese) <= code_names(english), sorted(code_names(chinese) - code_names(english))
    # the central figure (the same image file as the notebook's tagged plot) and the way to the runnable notebook
    assert f"](figures/{Path(notebook).stem}.png)" in chinese and zh.central_image(CHAPTERS / notebook)
    assert f"]({notebook})" in chinese, "link the English notebook, where the code runs"


@pytest.mark.parametrize("notebook", CHAPTER_PAGES)
def test_a_chinese_page_explains_every_exercise_of_its_chapter(notebook):
    stem = Path(notebook).stem
    tests = REPO / "tests" / "exercises" / f"test_{stem if stem.startswith('lab') else 'ch' + stem}.py"
    exercises = dict(EXERCISE_MARK.findall(tests.read_text()))
    assert exercises, tests
    chinese = (CHAPTERS / zh.chinese_page(notebook)).read_text()
    for number, function in exercises.items():
        assert f"make grade EX={number}" in chinese and f"`{function}`" in chinese, (number, function)


def test_the_chinese_reading_map_links_every_chapter_and_lab():
    index = (CHAPTERS / "index.zh.md").read_text()
    for notebook in sorted(p.name for p in CHAPTERS.glob("*.ipynb")):  # pending pages: the build links the English
        assert f"]({zh.chinese_page(notebook)})" in index, notebook
    for question in FIVE_ANSWERS:
        assert question in index
    assert formulas(index) <= formulas((CHAPTERS / "index.md").read_text())


def test_the_glossary_has_a_chinese_term_everywhere_and_the_chinese_glossary_agrees():
    def rows(text):
        return [[cell.strip() for cell in line.strip("|").split("|")] for line in text.split("\n")
                if line.startswith("| ") and not line.startswith("| term") and not line.startswith("| 中文")]

    english = {row[0]: row[3] for row in rows((CHAPTERS / "glossary.md").read_text())}
    assert all(english.values()), [term for term, chinese in english.items() if not chinese]
    if "glossary.md" in zh.PENDING:
        pytest.skip("the Chinese glossary page is pending (minirl/book/zh.py::PENDING)")
    chinese = {row[1]: row[0] for row in rows((CHAPTERS / "glossary.zh.md").read_text())}
    assert chinese == english  # the same terms, with the same Chinese names


def test_each_language_gets_its_own_search_index(tmp_path):
    docs = [{"location": "", "title": "The reading map", "text": "advantage"},
            {"location": "01_ppo/#the-problem", "title": "PPO", "text": "clip"},
            {"location": "zh/", "title": "阅读地图", "text": "\u200b优势\u200b"},
            {"location": "zh/01_ppo/#_1", "title": "PPO", "text": "\u200b裁剪\u200b"}]
    (tmp_path / "search").mkdir()
    index = {"config": {"lang": ["en", "zh"], "separator": "[\\s\\u200b\\-]+"}, "docs": docs}
    (tmp_path / "search" / "search_index.json").write_text(json.dumps(index))
    assert zh.split_search_index(tmp_path) == {"en": 2, "zh": 2}
    english = json.loads((tmp_path / "search" / "search_index.json").read_text())
    chinese = json.loads((tmp_path / "zh" / "search" / "search_index.json").read_text())
    assert [d["location"] for d in english["docs"]] == ["", "01_ppo/#the-problem"]
    assert [d["location"] for d in chinese["docs"]] == ["", "01_ppo/#_1"]  # relative to zh/, the Chinese base
    assert english["config"]["lang"] == chinese["config"]["lang"] == ["en"]  # lunr's zh needs a browser jieba
    assert zh.split_search_index(tmp_path) is None  # the hook runs after each language's build: split once
    assert json.loads((tmp_path / "zh" / "search" / "search_index.json").read_text()) == chinese


@pytest.mark.parametrize("url, base", [("zh/", "."), ("zh/01_ppo/", ".."), ("zh/glossary/", "..")])
def test_a_chinese_page_searches_from_the_chinese_root(url, base):
    head = '<script id="__config" type="application/json">{"annotate": null, "base": "%s", "search": "x"}</script>'
    depth_to_site_root = "/".join([".."] * url.count("/"))
    assert zh.search_root(head % depth_to_site_root, url) == head % base
