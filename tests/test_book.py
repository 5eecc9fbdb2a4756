"""The book site: builds strictly, serves its own math renderer, shows the reading map."""

import re
from pathlib import Path
from urllib.parse import urlsplit

import pytest

REPO = Path(__file__).resolve().parents[1]
PAPERS_IN_ORDER = ["PPO", "GAE", "InstructGPT", "GRPO", "DAPO", "DPO", "RLOO", "DeepSeek-R1",
                   "Rollout correction", "HybridFlow"]
LABS = ["GSM8K PPO", "Writing reward functions", "Reading the debug metrics", "The GRPO config"]


@pytest.fixture(scope="session")  # of this file, so its tests join the mkdocs_build group (tests/conftest.py)
def site(built_site):
    return built_site


def pages(site):
    """The book's pages (not MathJax's own files, not the 404 template)."""
    return sorted(p for p in site.rglob("*.html") if "mathjax" not in p.parts and p.name != "404.html")


def test_every_notebook_and_markdown_page_is_built(site):
    for source in sorted((REPO / "chapters").glob("*.ipynb")):
        assert (site / source.stem / "index.html").exists(), f"no page for {source.name}"
    assert (site / "index.html").exists()


def test_no_script_stylesheet_or_font_comes_from_the_network(site):
    """Math and styles must work offline: nothing loaded from a CDN (plain links to papers are fine)."""
    for page in pages(site):
        html = page.read_text()
        for tag, attr in (("script", "src"), ("link", "href"), ("img", "src")):
            for url in re.findall(rf"<{tag}\b[^>]*\b{attr}=\"([^\"]+)\"", html):
                assert not urlsplit(url).netloc and not url.startswith("//"), f"{page}: <{tag}> loads {url}"
        assert "fonts.googleapis" not in html, f"{page} loads Google Fonts"
        for host in ("unpkg.com", "cdnjs.", "cdn.jsdelivr"):  # also scripts that inject other scripts
            assert host not in html, f"{page} refers to {host}"


def test_mathjax_is_served_by_the_site_and_every_page_can_reach_it(site):
    for page in pages(site):
        html = page.read_text()
        srcs = [s for s in re.findall(r'<script\b[^>]*\bsrc="([^"]+)"', html) if "tex-svg.js" in s]
        assert srcs, f"{page} does not load MathJax"
        for src in srcs:
            target = (page.parent / urlsplit(src).path).resolve()
            assert target.exists(), f"{page}: {src} does not resolve to a file in the site"
    assert (site / "assets/mathjax/input/tex/extensions").is_dir()  # loaded on demand by tex-svg.js


def test_math_reaches_the_page_as_tex(site):
    index = (site / "index.html").read_text()
    assert 'class="arithmatex"' in index and "\\[" in index, "arithmatex did not mark the formulas for MathJax"
    chapter0 = (site / "00_tensors" / "index.html").read_text()
    assert r"\operatorname{logsumexp}" in chapter0


def test_notebook_pages_show_committed_plots(site):
    chapter0 = (site / "00_tensors" / "index.html").read_text()
    assert chapter0.count("data:image/png;base64") >= 2


def test_reading_map_lists_ten_papers_in_order_and_the_labs():
    index = (REPO / "chapters" / "index.md").read_text()
    table = index[index.index("## The ten papers"):index.index("## Hands-on labs")]
    positions = [table.find(f"**{paper}") if f"**{paper}" in table else table.find(paper) for paper in PAPERS_IN_ORDER]
    assert all(p >= 0 for p in positions), dict(zip(PAPERS_IN_ORDER, positions))
    assert positions == sorted(positions), "papers are not in the reading map's order"
    for lab in LABS:
        assert lab in index


def test_planned_chapters_are_not_linked():
    index = (REPO / "chapters" / "index.md").read_text()
    for target in re.findall(r"\]\(([^)#]+)", index):
        if not target.startswith("http"):
            assert (REPO / "chapters" / target).exists(), f"index.md links to {target}, which does not exist"


def test_concordance_covers_every_verl_twin_the_library_names():
    from minirl.book import concordance

    page = concordance.build()
    twins = concordance.verl_twins()
    assert len(twins) > 30
    for citation, twin in twins:
        assert f"| `{citation}` | `{twin}` |" in page
    for key, _ in concordance.config_keys():
        assert f"| `{key}` |" in page
    # a verl engineer looks up a metric and lands on the chapter that explains it
    assert "| `actor/pg_clipfrac` | [Chapter 1](01_ppo.ipynb)" in page


# The reading map's "read first" advice for each paper (../shared/reading-map.zh.md): the labs that a chapter's
# "Where next" must link.
READ_FIRST = {"01_ppo": ["lab_a_gsm8k", "lab_c_metrics"], "02_gae": ["lab_a_gsm8k"],
              "03_rlhf": ["lab_b_rewards", "lab_c_metrics"], "09_rollout_corr": ["lab_c_metrics"],
              "04_grpo": ["lab_d_grpo_config"], "05_dapo": ["lab_d_grpo_config"], "07_baselines": ["lab_d_grpo_config"],
              "08_r1": ["lab_a_gsm8k", "lab_b_rewards"],
              "10_hybridflow": ["lab_a_gsm8k", "lab_b_rewards", "lab_d_grpo_config"]}


def test_chapters_link_the_labs_the_reading_map_recommends():
    index = (REPO / "chapters" / "index.md").read_text()
    for chapter, labs in READ_FIRST.items():
        text = (REPO / "chapters" / f"{chapter}.py").read_text()
        row = next(line for line in text.splitlines() if line.startswith("# | **Where next** |"))
        for lab in labs:
            assert f"]({lab}.ipynb)" in row, f"{chapter}'s Where next does not link {lab}"
            assert f"]({lab}.ipynb)" in index, f"the reading map does not link {lab}"


def test_a_chapters_two_where_next_lists_agree():
    """The five answers' "Where next" and the chapter's closing "Where next" section link the same pages (a
    reader who follows either gets the same advice)."""
    import re

    link = re.compile(r"\]\(([\w.]+\.ipynb)\)")
    for path in sorted((REPO / "chapters").glob("[0-9][0-9]_*.py")):
        text = path.read_text()
        row = next((line for line in text.splitlines() if line.startswith("# | **Where next** |")), None)
        section = re.search(r"^# ## \d+\. Where next\n(.*?)(?=^# %%|\Z)", text, re.MULTILINE | re.DOTALL)
        if row is None or section is None:
            continue
        assert set(link.findall(row)) == set(link.findall(section.group(1))), (
            path.name, sorted(set(link.findall(row)) ^ set(link.findall(section.group(1)))))
