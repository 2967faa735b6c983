"""The notebook editor in a real browser (issue 30): headless Chromium from Debian's packages,
driven by Selenium through /usr/bin/chromedriver (Selenium Manager downloads nothing).

The MNIST notebook edited, run (its epoch lines seen while the training cell still runs) and
saved; one test per item of the editor's bug list (a new paragraph from an empty one, deleting
the whole document, typing a fence, deleting a selected paragraph, a plot opening a window,
outputs held back until a cell ends); the cell operations with undo and redo, a file changed on
disk, interrupt and restart, and the page's own editing rules (static/model.js). Each test
leaves a screenshot of the editor in $CORVID_TEST_ARTIFACTS (default: its tmp_path)."""

import os
import pathlib
import shutil
import tempfile
import time

import pytest

from corvid.notebook import clean, parse, run

ROOT = pathlib.Path(__file__).resolve().parents[1]
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
CANDIDATES = [ROOT.parent / "shared" / "data" / "mnist", pathlib.Path("/work/shared/data/mnist")]
MNIST_DIR = next((p for p in CANDIDATES if (p / "t10k-images-idx3-ubyte.gz").is_file()), None)


def _missing() -> str | None:
    for path in (CHROMIUM, CHROMEDRIVER):
        if not os.access(path, os.X_OK):
            return f"{path} is not installed (Debian: apt-get install chromium chromium-driver)"
    for module in ("selenium", "jupyter_client", "ipykernel"):
        try:
            __import__(module)
        except ImportError:
            return f"{module} is not installed (pip install -e '.[test]')"
    return None


pytestmark = pytest.mark.skipif(_missing() is not None, reason=str(_missing()))

if _missing() is None:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    from corvid.notebook.editor import EditorServer


@pytest.fixture(scope="module")
def browser():
    profile = tempfile.mkdtemp(prefix="corvid-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--no-first-run", "--window-size=1280,1000", f"--user-data-dir={profile}"):
        options.add_argument(arg)
    options.unhandled_prompt_behavior = "accept"  # leaving a page with unsaved edits asks; say yes
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_script_timeout(30)
    yield driver
    driver.quit()
    shutil.rmtree(profile, ignore_errors=True)


class Page:
    """The editor's page for one notebook, and what the tests ask of it."""

    def __init__(self, driver, server, path):
        self.driver, self.server, self.path = driver, server, path

    def wait(self, condition, timeout=60.0, what="the condition"):  # (generous: CI runs it beside other tests)
        """Poll ``condition()`` every 50 ms until it is truthy; return its value."""
        deadline = time.monotonic() + timeout
        while True:
            value = condition()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout} s waiting for {what}")
            time.sleep(0.05)

    def js(self, script, *args):
        return self.driver.execute_script(script, *args)

    def blocks(self):
        """[(type, text)] of the blocks on the page, as a reader sees them."""
        return self.js("return [...document.querySelectorAll('#doc > .block')].map(b => "
                       "[b.classList.contains('code') ? 'code' : 'text', "
                       "(b.querySelector('textarea') || b.querySelector('.prose, pre.code')).value ?? "
                       "b.querySelector('.prose, pre.code').innerText].map(v => v.replace(/\\n+$/, '')))")

    def block(self, index):
        return self.driver.find_elements(By.CSS_SELECTOR, "#doc > .block")[index]

    def cell(self, index):
        return self.driver.find_elements(By.CSS_SELECTOR, "#doc > .block.code")[index]

    def click_text(self, index):
        """Start editing block ``index`` with the caret at its end."""
        self.block(index).find_element(By.CSS_SELECTOR, ".prose, pre.code").click()
        self.wait(lambda: self.editing(), what="a textarea")
        self.keys(Keys.CONTROL, Keys.END)

    def editing(self):
        """(class, value) of the textarea being edited, or None (read at once: the page may rebuild it)."""
        return self.js("const t = document.querySelector('#doc textarea'); return t && [t.className, t.value]")

    def keys(self, *keys):
        """Press keys at the focused element, the leading modifiers (Ctrl, Shift, Alt) held down."""
        modifiers = []
        while keys and keys[0] in (Keys.CONTROL, Keys.SHIFT, Keys.ALT):
            modifiers.append(keys[0])
            keys = keys[1:]
        chain = ActionChains(self.driver)
        for m in modifiers:
            chain.key_down(m)
        chain.send_keys(*keys)
        for m in reversed(modifiers):
            chain.key_up(m)
        chain.perform()

    def type(self, text):
        """Type at the focused element (key by key, so the page's own keys act, as for a person)."""
        self.keys(text)

    def escape(self):
        self.keys(Keys.ESCAPE)
        self.wait(lambda: not self.editing(), what="the edit to end")
        self.settle()

    def settle(self):
        """Wait for the renders the page asked the server for."""
        self.driver.execute_async_script(
            "const done = arguments[0]; setTimeout(done, 150);")

    def status(self, index):
        return self.js("return document.querySelectorAll('#doc .block.code')[arguments[0]].dataset.status", index)

    def outputs(self, index):
        return self.js("return document.querySelectorAll('#doc .block.code')[arguments[0]]"
                       ".querySelector('.outputs').innerText.replace(/\\n+$/, '')", index)

    def save(self):
        self.keys(Keys.CONTROL, "s")
        return self.wait(lambda: self.js("return document.getElementById('save-state').textContent") == "saved",
                         what="the save")

    def run_all(self):
        self.driver.find_element(By.ID, "run-all").click()

    def idle(self, timeout=60):
        self.wait(lambda: self.js("return [...document.querySelectorAll('#doc .block.code')].every("
                                  "b => !['queued', 'running'].includes(b.dataset.status))") and
                  self.js("return document.getElementById('kernel').textContent") == "Python idle",
                  timeout, "every cell to finish")


@pytest.fixture
def editor(browser, tmp_path, request):
    """``editor(path_or_text)`` opens the editor on a notebook file (a text is written to nb.md)."""
    servers = []

    def open_editor(notebook, autosave=0):
        path = notebook if isinstance(notebook, pathlib.Path) else tmp_path / "nb.md"
        if not isinstance(notebook, pathlib.Path):
            path.write_text(notebook)
        server = EditorServer(path, autosave=autosave)
        server.start()
        servers.append(server)
        browser.get(server.url)
        page = Page(browser, server, path)
        page.wait(lambda: browser.execute_script("return document.body.dataset.ready"), what="the page to load")
        page.wait(lambda: "idle" in browser.find_element(By.ID, "kernel").text, 60, "the kernel to start")
        return page

    yield open_editor
    artifacts = pathlib.Path(os.environ.get("CORVID_TEST_ARTIFACTS") or tmp_path)
    artifacts.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(artifacts / f"{request.node.name}.png"))
    browser.get("about:blank")
    for server in servers:
        server.close()


@pytest.mark.skipif(MNIST_DIR is None, reason=f"the offline MNIST files are not in any of {CANDIDATES}")
def test_mnist_notebook_is_edited_run_with_streamed_output_and_saved(editor, tmp_path, monkeypatch):
    for name in ("mnist.md", "mnist.py"):
        shutil.copy(ROOT / "examples" / name, tmp_path / name)
    monkeypatch.setenv("CORVID_DATA_DIR", str(MNIST_DIR))  # the kernel inherits it
    page = editor(tmp_path / "mnist.md")
    assert [t for t, _ in page.blocks()].count("code") == 9
    # train on 640 images (5 steps an epoch) and evaluate on 200: the whole notebook in seconds
    page.cell(0).find_element(By.CSS_SELECTOR, "pre.code").click()
    page.wait(page.editing)
    page.keys(Keys.CONTROL, Keys.END)
    page.type("\ntrain, test = cv.data.Subset(train, range(640)), cv.data.Subset(test, range(200))")
    page.escape()
    page.run_all()
    # an epoch line of this run is on the page while the training cell still runs (the outputs
    # read from the file stay until the cell starts)
    seen = page.wait(lambda: page.js(
        "const b = document.querySelectorAll('#doc .block.code')[3];"
        "const text = b.querySelector('.outputs').innerText;"
        "return b.dataset.status === 'running' && text.includes('epoch 1:') && text;"), 180,
        "the first epoch line while the training cell runs")
    assert "epoch 4:" not in seen
    page.idle(180)
    assert all(page.status(i) == "ok" for i in range(9)), [page.status(i) for i in range(9)]
    assert "epoch 4:" in page.outputs(3)
    curves = page.cell(4).find_element(By.CSS_SELECTOR, "img.output-image")
    assert page.js("return arguments[0].complete && arguments[0].naturalWidth", curves) > 400
    page.driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", page.cell(3))
    page.save()
    text = (tmp_path / "mnist.md").read_text()
    nb = parse(text)
    assert "cv.data.Subset(train, range(640))" in nb.cells[0].source
    assert not any(o.kind == "error" for c in nb.cells for o in c.outputs)
    assert "epoch 4:" in text
    assert [o.text for o in nb.cells[4].outputs] == ["mnist_files/cell5_1.png"]
    assert (tmp_path / "mnist_files" / "cell5_1.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "mistakes in 200 images" in text
    assert clean(tmp_path / "mnist.md") == 9 and not (tmp_path / "mnist_files").exists()  # run's format exactly


def test_enter_in_an_empty_paragraph_makes_a_new_paragraph(editor):
    page = editor("# Title\n\nFirst paragraph.\n\nLast paragraph.\n")
    page.click_text(1)
    page.keys(Keys.ENTER, Keys.ENTER)  # a line break, then an empty line: a new paragraph
    assert page.blocks()[2] == ["text", ""] and page.editing()[1] == ""
    page.keys(Keys.ENTER)  # Enter again, in the empty paragraph
    page.type("Second paragraph.")
    page.escape()
    assert page.blocks() == [["text", "Title"], ["text", "First paragraph."], ["text", "Second paragraph."],
                             ["text", "Last paragraph."]]
    assert page.js("return document.querySelectorAll('#doc .prose.empty, #doc .prose p:empty').length") == 0
    page.save()
    assert page.path.read_text() == "# Title\n\nFirst paragraph.\n\nSecond paragraph.\n\nLast paragraph.\n"


def test_deleting_the_whole_document_leaves_nothing_behind(editor, tmp_path):
    path = tmp_path / "nb.md"
    path.write_text("# Plots\n\nA figure:\n\n```python\nimport matplotlib.pyplot as plt\nplt.plot([1, 2])\n"
                    "print('drawn')\n```\n\nThe end.\n")
    assert run(path).ok and (tmp_path / "nb_files" / "cell1_1.png").is_file()
    page = editor(path)
    assert page.js("return document.querySelectorAll('#doc img.output-image').length") == 1
    page.driver.find_element(By.ID, "keys").click()  # outside every block: command mode
    page.keys(Keys.CONTROL, "a")
    assert page.js("return document.querySelectorAll('#doc .block.selected').length") == 4
    page.keys(Keys.DELETE)
    # one empty paragraph, ready to type in, and nothing else: no outputs, images or hidden blocks
    assert page.js("return document.getElementById('doc').children.length") == 1
    assert page.js("return [...document.querySelectorAll('#doc *')].filter(e => e.hidden || "
                   "getComputedStyle(e).display === 'none').length") == 0
    assert page.js("return document.querySelectorAll('#doc .outputs, #doc img, #doc pre').length") == 0
    page.type("Fresh start.")
    page.save()
    assert path.read_text() == "Fresh start.\n"
    assert not (tmp_path / "nb_files").exists()


def test_typing_a_fence_does_not_turn_the_rest_into_code(editor):
    page = editor("# Title\n\nIntro.\n\n```python\nx = 1\n```\n\n## After\n\nText after.\n")
    page.click_text(1)
    page.type("\n```")  # a fence opened and left open
    page.escape()
    assert page.js("return document.querySelectorAll('#doc .block.code').length") == 1
    assert page.js("return [...document.querySelectorAll('#doc h2')].map(h => h.textContent)") == ["After"]
    assert page.blocks()[-1] == ["text", "Text after."]
    page.click_text(4)
    page.type("\n\n```")  # an empty line makes a paragraph; a fence and Enter there make a code cell
    page.keys(Keys.ENTER)
    assert "code-editor" in page.editing()[0]
    page.type("y = 2")
    page.escape()
    assert page.blocks()[-2:] == [["text", "Text after."], ["code", "y = 2"]]
    page.save()
    nb = parse(page.path.read_text())
    assert [c.source for c in nb.cells] == ["x = 1\n", "y = 2\n"]
    assert "Intro.\n```\n```\n" in page.path.read_text() and "## After\n" in page.path.read_text()


def test_deleting_a_selected_paragraph_keeps_the_paragraph_break(editor):
    page = editor("First paragraph.\n\nSecond paragraph.\n\nThird paragraph.\n")
    page.click_text(1)
    page.keys(Keys.CONTROL, "a")  # the whole paragraph selected, then deleted
    page.keys(Keys.DELETE)
    page.type("Replaced.")
    page.escape()
    page.click_text(2)
    page.keys(Keys.SHIFT, Keys.HOME)
    page.keys(Keys.DELETE)
    page.type("Last.")
    page.escape()
    assert page.blocks() == [["text", "First paragraph."], ["text", "Replaced."], ["text", "Last."]]
    page.save()
    assert page.path.read_text() == "First paragraph.\n\nReplaced.\n\nLast.\n"
    page.click_text(0)  # Delete at the end with nothing selected joins the next paragraph, as in any editor
    page.keys(Keys.DELETE)
    page.escape()
    assert page.blocks()[0] == ["text", "First paragraph. Replaced."]


def test_a_plot_shows_inline_and_opens_no_window(editor):
    page = editor("```python\nimport matplotlib\nimport matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\n"
                  "plt.show()\nprint(matplotlib.get_backend())\n```\n\n```python\nimport corvid as cv\n"
                  "cv.plot.line([1.0, 2.0, 4.0])\n```\n")
    windows = page.driver.window_handles
    page.run_all()
    page.idle()
    assert page.outputs(0).strip().endswith("module://matplotlib_inline.backend_inline")
    for index in (0, 1):
        image = page.cell(index).find_element(By.CSS_SELECTOR, "img.output-image")
        assert page.js("return arguments[0].complete && arguments[0].naturalWidth", image) > 200
        image.click()
    assert page.outputs(1) == ""  # the Axes cv.plot.line returns is not shown: its picture is
    assert page.driver.window_handles == windows


def test_output_appears_while_the_cell_runs(editor):
    page = editor("```python\nimport time\nprint('first', flush=True)\ntime.sleep(5)\nprint('second')\n```\n")
    page.cell(0).find_element(By.CSS_SELECTOR, "pre.code").click()
    page.keys(Keys.SHIFT, Keys.ENTER)
    seen = page.wait(lambda: "first" in page.outputs(0) and (page.status(0), page.outputs(0)), 60, "'first'")
    assert seen == ("running", "first")
    page.idle()
    assert page.outputs(0) == "first\nsecond" and page.status(0) == "ok"
    assert page.cell(0).find_element(By.CSS_SELECTOR, ".count").text == "[1]"


def test_cells_are_added_moved_split_deleted_with_undo_and_redo(editor):
    page = editor("```python\nx = 1\ny = 2\n```\n\n```python\nprint(x + y)\n```\n")
    page.click_text(0)
    page.keys(Keys.UP)  # the caret to the second line's start: split there
    page.keys(Keys.HOME)
    page.keys(Keys.CONTROL, Keys.SHIFT, "-")
    page.escape()
    assert page.blocks() == [["code", "x = 1"], ["code", "y = 2"], ["code", "print(x + y)"]]
    page.keys(Keys.CONTROL, "z")
    assert page.blocks() == [["code", "x = 1\ny = 2"], ["code", "print(x + y)"]]
    page.keys(Keys.CONTROL, Keys.SHIFT, "z")
    assert len(page.blocks()) == 3
    page.keys("j")  # the cursor down to the second half
    page.keys("b")  # and a new cell below it
    page.type("z = 3")
    page.escape()
    page.keys(Keys.ALT, Keys.DOWN)  # moved below the print
    assert [s for _, s in page.blocks()] == ["x = 1", "y = 2", "print(x + y)", "z = 3"]
    page.keys("d", "d")
    assert [s for _, s in page.blocks()] == ["x = 1", "y = 2", "print(x + y)"]
    page.keys(Keys.CONTROL, "z")
    assert [s for _, s in page.blocks()][-1] == "z = 3"
    page.run_all()
    page.idle()
    assert page.outputs(2) == "3"
    page.keys("j")  # the cursor from the print (where the undone deletion left it) to the last cell
    page.driver.find_element(By.ID, "run-from").click()
    page.idle()
    counts = page.js("return [...document.querySelectorAll('#doc .count')].map(c => c.textContent)")
    assert counts == ["[1]", "[2]", "[3]", "[5]"]  # only the last cell ran again
    page.save()
    nb = parse(page.path.read_text())
    assert [c.source for c in nb.cells] == ["x = 1\n", "y = 2\n", "print(x + y)\n", "z = 3\n"]
    assert [o.text for o in nb.cells[2].outputs] == ["3"]


def test_a_file_changed_on_disk_is_offered_for_reload_not_overwritten(editor):
    page = editor("Original.\n")
    page.click_text(0)
    page.type(" Edited here.")
    page.escape()
    time.sleep(0.02)
    page.path.write_text("Changed by another program.\n")
    banner = page.driver.find_element(By.ID, "banner")
    page.wait(banner.is_displayed, 60, "the changed-on-disk banner")
    page.keys(Keys.CONTROL, "s")
    page.wait(lambda: page.js("return document.getElementById('save-state').textContent") == "changed on disk")
    assert page.path.read_text() == "Changed by another program.\n"
    page.driver.find_element(By.ID, "reload").click()
    page.wait(lambda: page.blocks() == [["text", "Changed by another program."]], what="the reload")
    assert not banner.is_displayed()
    page.click_text(0)
    page.type(" And mine.")
    page.escape()
    page.save()
    assert page.path.read_text() == "Changed by another program. And mine.\n"


def test_interrupt_and_restart(editor):
    page = editor("```python\nx = 5\n```\n\n```python\nimport time\nfor i in range(600):\n    time.sleep(0.05)\n```\n\n"
                  "```python\nprint(x)\n```\n")
    page.run_all()
    page.wait(lambda: page.status(1) == "running", what="the loop to start")
    assert page.status(2) == "queued"
    page.driver.find_element(By.ID, "interrupt").click()
    page.idle(15)
    assert page.status(1) == "error" and "KeyboardInterrupt" in page.outputs(1)
    assert page.status(2) == "cancelled"
    page.driver.find_element(By.ID, "restart").click()
    page.wait(lambda: page.js("return document.getElementById('kernel').textContent") == "Python restarting"
              or page.js("return document.getElementById('kernel').textContent") == "Python idle")
    page.idle(30)
    page.cell(2).find_element(By.CSS_SELECTOR, "pre.code").click()
    page.keys(Keys.CONTROL, Keys.ENTER)
    page.idle()
    assert "NameError: name 'x' is not defined" in page.outputs(2)


def test_editing_rules_of_the_page(editor):
    """static/model.js on its own: what Enter does in a paragraph, indentation, undo snapshots."""
    page = editor("x\n")
    result = page.driver.execute_async_script("""
        const done = arguments[arguments.length - 1];
        import('/static/model.js').then(m => {
          const doc = new m.Doc('', [m.newBlock('text', 'a')]);
          doc.record(); doc.blocks[0].source = 'b'; doc.undo(); const undone = doc.blocks[0].source;
          doc.redo();
          done({
            newline: m.enterAction('Some text', 9, 9).kind,
            empty: m.enterAction('', 0, 0),
            split: m.enterAction('One\\n\\nTwo', 4, 4),
            code: m.enterAction('Intro\\n```python', 15, 15),
            inFence: m.enterAction('```bash\\nls\\n', 11, 11).kind,
            selection: m.enterAction('abc', 0, 3).kind,
            indent: [m.indentAfter('def f():', 8), m.indentAfter('    x = 1', 9), m.indentAfter('x', 1)],
            offset: [m.sourceOffset('Some *new* text', 'Some new'), m.sourceOffset('abc', '')],
            undone, redone: doc.blocks[0].source,
          });
        }).catch(e => done(String(e)));
    """)
    assert result == {
        "newline": "newline", "empty": {"kind": "split", "before": "", "after": ""},
        "split": {"kind": "split", "before": "One", "after": "Two"},
        "code": {"kind": "code", "before": "Intro", "after": ""}, "inFence": "newline", "selection": "newline",
        "indent": ["    ", "    ", ""], "offset": [9, 3], "undone": "a", "redone": "b"}
    origin = page.server.url.split("/?")[0]
    loaded = page.js("return performance.getEntriesByType('resource').map(e => e.name)")
    assert loaded and all(url.startswith(origin + "/") for url in loaded), loaded  # nothing from elsewhere


def test_autosave_writes_edits_and_outputs_and_a_tensor_shows_as_a_table(editor):
    page = editor("Text.\n\n```python\nimport corvid as cv\ncv.arange(6).reshape(2, 3)\n```\n", autosave=0.3)
    page.click_text(0)
    page.type(" More text.")
    page.wait(lambda: page.path.read_text().startswith("Text. More text.\n"), 60, "the autosave of an edit")
    page.escape()
    page.run_all()
    page.idle()
    cells = page.js("return [...document.querySelectorAll('#doc table.tensor tr')].map(r => r.innerText.split('\\t'))")
    assert cells == [["0", "1", "2"], ["3", "4", "5"]]
    assert "2 × 3" in page.cell(0).find_element(By.CSS_SELECTOR, "table.tensor caption").text
    page.wait(lambda: "```result\nTensor([[0, 1, 2],\n        [3, 4, 5]])\n```" in page.path.read_text(), 60,
              "the autosave of the outputs")
    assert page.js("return document.getElementById('save-state').textContent") == "saved"
