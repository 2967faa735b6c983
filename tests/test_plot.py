"""corvid.plot (issue 7): every plot type draws what it was given (structural checks on the
matplotlib figure, and pixels for images), files save in each format, bad input fails clearly."""

import os
import subprocess
import sys

import numpy as np
import pytest

import corvid as cv

matplotlib = pytest.importorskip("matplotlib", reason="corvid.plot needs matplotlib (the [plot] extra)")
plot = cv.plot
plt = pytest.importorskip("matplotlib.pyplot")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _legend_texts(ax):
    return [t.get_text() for t in ax.get_legend().get_texts()]


def test_line_takes_tensors_and_draws_one_line_per_column_with_labels_and_scales():
    x = cv.linspace(0, 1, 5)
    ax = plot.line(x, x * 2, label="double", title="t", xlabel="x", ylabel="y", logy=True)
    (line,) = ax.get_lines()
    np.testing.assert_allclose(line.get_xdata(), np.linspace(0, 1, 5), rtol=1e-6)
    np.testing.assert_allclose(line.get_ydata(), 2 * np.linspace(0, 1, 5), rtol=1e-6)
    assert (ax.get_title(), ax.get_xlabel(), ax.get_ylabel(), ax.get_yscale()) == ("t", "x", "y", "log")
    assert _legend_texts(ax) == ["double"]

    ys = np.arange(12.0).reshape(4, 3)
    ax = plot.line(ys, label=["a", "b", "c"], logx=True)  # one argument: plotted against 0, 1, 2...
    assert [list(ln.get_ydata()) for ln in ax.get_lines()] == [list(ys[:, k]) for k in range(3)]
    assert list(ax.get_lines()[0].get_xdata()) == [0, 1, 2, 3]
    assert _legend_texts(ax) == ["a", "b", "c"] and ax.get_xscale() == "log"


def test_line_draws_into_given_axes_and_converts_bfloat16():
    fig, ax = plot.subplots()
    out = plot.line([1, 2, 3], cv.Tensor([1.0, 4.0, 9.0]).astype(cv.bfloat16), ax=ax)
    assert out is ax and len(fig.axes) == 1
    assert list(ax.get_lines()[0].get_ydata()) == [1.0, 4.0, 9.0]


def test_line_rejects_bad_shapes_and_values():
    with pytest.raises(ValueError, match="1-D .* or 2-D"):
        plot.line(cv.ones(2, 3, 4))
    with pytest.raises(ValueError, match="x has 3 values, expected 4"):
        plot.line([1, 2, 3], [1, 2, 3, 4])
    with pytest.raises(ValueError, match="2 labels for 3 lines"):
        plot.line(np.ones((5, 3)), label=["a", "b"])
    with pytest.raises(TypeError, match="complex"):
        plot.line(cv.Tensor([1 + 2j, 3j]))
    with pytest.raises(TypeError, match="ax must be matplotlib Axes"):
        plot.line([1, 2], ax="left")


def test_scatter_places_points_and_adds_a_colorbar():
    ax = plot.scatter(cv.Tensor([0.0, 1.0, 2.0]), [3, 4, 5], c=cv.Tensor([0.1, 0.5, 0.9]), colorbar=True,
                      label="pts")
    (points,) = ax.collections
    np.testing.assert_allclose(points.get_offsets(), [[0, 3], [1, 4], [2, 5]])
    assert points.colorbar is not None and len(ax.figure.axes) == 2
    with pytest.raises(ValueError, match="y has 2 values, expected 3"):
        plot.scatter([1, 2, 3], [1, 2])


def test_bar_with_categories_error_bars_and_horizontal():
    ax = plot.bar(["cat", "dog", "bird"], cv.Tensor([3.0, 5.0, 2.0]), yerr=[0.5, 0.5, 0.5])
    assert [p.get_height() for p in ax.patches] == [3.0, 5.0, 2.0]
    ax.figure.canvas.draw()
    assert [t.get_text() for t in ax.get_xticklabels()] == ["cat", "dog", "bird"]
    (bars,) = [c for c in ax.containers if isinstance(c, matplotlib.container.BarContainer)]
    assert len(bars.errorbar.lines[2][0].get_segments()) == 3  # one error bar per bar
    ax = plot.bar([4, 1], horizontal=True, logy=True)
    assert [p.get_width() for p in ax.patches] == [4, 1] and ax.get_xscale() == "log"


def test_hist_counts_every_element_and_rejects_nan():
    values = cv.randn(10, 100)
    ax = plot.hist(values, bins=20, label="w")
    assert len(ax.patches) == 20 and sum(p.get_height() for p in ax.patches) == 1000
    ax = plot.hist(values, bins=10, density=True)
    widths = [p.get_width() for p in ax.patches]
    assert sum(p.get_height() * w for p, w in zip(ax.patches, widths)) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="1 of the 3 values are NaN"):
        plot.hist([1.0, float("nan"), 2.0])
    with pytest.raises(ValueError, match="empty"):
        plot.hist([])


def test_errorbar_and_fill_between():
    ax = plot.errorbar([1, 2, 3], cv.Tensor([1.0, 4.0, 9.0]), yerr=cv.Tensor([0.5, 1.0, 1.5]), label="sq")
    (container,) = ax.containers
    np.testing.assert_allclose(container.lines[0].get_ydata(), [1, 4, 9])
    segments = container.lines[2][0].get_segments()
    np.testing.assert_allclose([s[:, 1] for s in segments], [[0.5, 1.5], [3, 5], [7.5, 10.5]])
    assert _legend_texts(ax) == ["sq"]

    x = cv.linspace(0, 1, 11)
    ax = plot.fill_between(x, x - 0.1, x + 0.1, label="band")
    (band,) = ax.collections
    ys = band.get_paths()[0].vertices[:, 1]
    assert ys.min() == pytest.approx(-0.1, abs=1e-6) and ys.max() == pytest.approx(1.1, abs=1e-6)
    assert _legend_texts(ax) == ["band"]
    with pytest.raises(ValueError, match="y2 has 2 values, expected 11"):
        plot.fill_between(x, x, [0, 1])


def test_imshow_channels_first_and_last_and_colorbar():
    chw = np.zeros((3, 4, 5), np.float32)
    chw[0] = 1.0  # red
    ax = plot.imshow(cv.Tensor(chw), title="red")
    img = ax.images[0].get_array()
    assert img.shape == (4, 5, 3) and img[..., 0].min() == 1 and img[..., 1:].max() == 0
    assert not ax.axison and ax.get_title() == "red"
    ax = plot.imshow(cv.ones(1, 6, 7), colorbar=True, axis=True)
    assert ax.images[0].get_array().shape == (6, 7) and ax.images[0].get_cmap().name == "gray"
    assert ax.images[0].colorbar is not None and ax.axison
    with pytest.raises(ValueError, match="an image is"):
        plot.imshow(cv.ones(2, 5, 5))


def test_imshow_pixels_show_the_values():
    """An image check with a tolerance: a 2x2 checkerboard renders dark and light quadrants."""
    fig, ax = plot.subplots(figsize=(2, 2))
    plot.imshow([[0.0, 1.0], [1.0, 0.0]], ax=ax)
    ax.set_position([0, 0, 1, 1])
    fig.set_layout_engine("none")
    fig.canvas.draw()
    pixels = np.asarray(fig.canvas.buffer_rgba())[..., :3].mean(axis=-1)
    h, w = pixels.shape
    quadrant = {(r, c): pixels[r * h // 2 + h // 8: (r + 1) * h // 2 - h // 8,
                               c * w // 2 + w // 8: (c + 1) * w // 2 - w // 8].mean() for r in (0, 1) for c in (0, 1)}
    assert quadrant[0, 0] < 10 and quadrant[1, 1] < 10
    assert quadrant[0, 1] > 245 and quadrant[1, 0] > 245


def test_heatmap_cells_annotations_ticks_and_colorbar():
    m = np.arange(6).reshape(2, 3)
    ax = plot.heatmap(cv.Tensor(m), annotate=True, fmt="{:d}", xticklabels=["a", "b", "c"],
                      yticklabels=["r0", "r1"], xlabel="col", title="h")
    np.testing.assert_array_equal(ax.images[0].get_array(), m)
    assert sorted(t.get_text() for t in ax.texts) == [str(v) for v in range(6)]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["a", "b", "c"]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["r0", "r1"]
    assert ax.images[0].colorbar is not None
    dark = next(t for t in ax.texts if t.get_text() == "0")  # the lowest value: dark viridis, white text
    assert matplotlib.colors.to_hex(dark.get_color()) == "#ffffff"
    with pytest.raises(ValueError, match="2-D"):
        plot.heatmap(cv.ones(3))
    with pytest.raises(ValueError, match="2 xticklabels for 3 columns"):
        plot.heatmap(m, xticklabels=["a", "b"])


def test_image_grid_titles_labels_and_highlights_mistakes():
    images = cv.rand(10, 1, 8, 8)
    labels = cv.Tensor([0, 1, 2, 3, 4, 5, 6, 7, 8, 9])
    logits = np.eye(10)[[0, 1, 2, 3, 4, 5, 6, 7, 8, 1]]  # the last image is predicted wrong
    fig = plot.image_grid(images, labels=labels, predictions=logits, ncols=4, title="grid")
    assert len(fig.axes) == 12  # 3 rows of 4; the two spare axes are hidden
    shown = [ax for ax in fig.axes if ax.images]
    assert len(shown) == 10 and all(ax.images[0].get_array().shape == (8, 8) for ax in shown)
    assert [ax.axison for ax in fig.axes[10:]] == [False, False]
    titles = [ax.get_title() for ax in shown]
    assert titles[:9] == [str(i) for i in range(9)] and titles[9] == "1 (true 9)"
    red = matplotlib.colors.to_hex(shown[9].title.get_color())
    assert red == "#d62728" and shown[9].spines["left"].get_visible()
    assert matplotlib.colors.to_hex(shown[0].title.get_color()) != red and not shown[0].spines["left"].get_visible()
    assert fig.get_suptitle() == "grid"

    fig = plot.image_grid(np.zeros((2, 5, 5, 3)), labels=[1, 0], class_names=["cat", "dog"])
    assert [ax.get_title() for ax in fig.axes] == ["dog", "cat"]
    assert fig.axes[0].images[0].get_array().shape == (5, 5, 3)


def test_image_grid_rejects_what_is_not_a_batch_of_images():
    with pytest.raises(ValueError, match="must be a batch"):
        plot.image_grid(cv.ones(8, 784))
    with pytest.raises(ValueError, match="an image is"):
        plot.image_grid(cv.ones(4, 2, 8, 8))
    with pytest.raises(ValueError, match="labels must hold one class index per image"):
        plot.image_grid(cv.ones(4, 8, 8), labels=[1, 2, 3])
    with pytest.raises(ValueError, match="slice the batch"):
        plot.image_grid(np.zeros((300, 4, 4)))


def test_contour_filled_and_lines():
    xs = cv.linspace(-1, 1, 20)
    X, Y = cv.meshgrid(xs, xs)
    z = X * X + Y * Y
    ax = plot.contour(z, xs, xs, levels=5, title="bowl")
    assert len(ax.figure.axes) == 2 and ax.get_title() == "bowl"  # the plot and its colorbar
    (filled,) = ax.collections
    assert filled.get_array().size >= 4  # one colour per band
    ax = plot.contour(z.numpy(), levels=[0.5, 1.0], filled=False, colorbar=False)
    assert len(ax.figure.axes) == 1 and len(ax.texts) >= 2  # the lines are labelled with their values
    with pytest.raises(ValueError, match="x has 3 values and y 20"):
        plot.contour(z, [1, 2, 3], xs)


def test_surface_is_3d_and_checks_its_axes():
    xs = np.linspace(-1, 1, 10)
    ax = plot.surface(np.outer(xs, xs), xs, xs, zlabel="z", colorbar=True)
    assert ax.name == "3d" and ax.get_zlabel() == "z" and len(ax.collections) == 1
    _, axes = plot.subplots(1, 2, projection="3d")
    assert plot.surface(np.ones((3, 3)), ax=axes[1]) is axes[1]
    _, flat = plot.subplots()
    with pytest.raises(ValueError, match="3-D axes"):
        plot.surface(np.ones((3, 3)), ax=flat)
    with pytest.raises(ValueError, match="2-D"):
        plot.surface(np.ones(3))


def test_subplots_grid_and_title():
    fig, axes = plot.subplots(2, 3, title="all")
    assert axes.shape == (2, 3) and len(fig.axes) == 6 and fig.get_suptitle() == "all"
    _, one = plot.subplots(squeeze=False)
    assert one.shape == (1, 1)
    with pytest.raises(ValueError, match="at least 1"):
        plot.subplots(0, 2)


@pytest.mark.parametrize("ext, signature", [("png", b"\x89PNG\r\n\x1a\n"), ("svg", b"<?xml"), ("pdf", b"%PDF-")])
def test_savefig_writes_each_format_and_the_same_file_twice(tmp_path, ext, signature):
    ax = plot.line([1, 3, 2], title="saved")
    path = plot.savefig(ax, tmp_path / f"fig.{ext}")  # axes: their figure is saved
    data = path.read_bytes()
    assert data.startswith(signature) and len(data) > 1000
    plot.savefig(ax.figure, tmp_path / f"again.{ext}")
    assert (tmp_path / f"again.{ext}").read_bytes() == data  # no dates in the metadata


def test_savefig_rejects_unknown_formats_and_non_figures(tmp_path):
    ax = plot.line([1, 2])
    with pytest.raises(ValueError, match=r"\.png, \.svg, \.pdf"):
        plot.savefig(ax, tmp_path / "fig.jpg")
    with pytest.raises(TypeError, match="Figure or Axes"):
        plot.savefig("fig", tmp_path / "fig.png")


def test_theme_styles_corvid_figures_only_and_keeps_user_overrides():
    before = dict(matplotlib.rcParams)
    ax = plot.line([1, 2, 3])
    assert not ax.spines["top"].get_visible()  # the theme: no top/right frame
    assert dict(matplotlib.rcParams) == before  # nothing global changed
    _, plain = plt.subplots()
    assert plain.spines["top"].get_visible()
    with plot.theme({"axes.spines.top": True, "lines.linewidth": 4.0}):
        ax = plot.line([1, 2, 3])
    assert ax.spines["top"].get_visible() and ax.get_lines()[0].get_linewidth() == 4.0
    assert dict(matplotlib.rcParams) == before


def _python(code, **env):
    full = {**os.environ, "PYTHONPATH": ROOT, **env}
    full.pop("MPLBACKEND", None)
    return subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, env=full,
                          timeout=120)


def test_headless_import_uses_agg_and_missing_matplotlib_says_what_to_install():
    done = _python("import corvid as cv, matplotlib; cv.plot.line([1, 2]); print(matplotlib.get_backend())")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().lower() == "agg"
    done = _python("import sys; sys.modules['matplotlib'] = None\nimport corvid as cv\ncv.plot")
    assert done.returncode == 1
    assert "ImportError" in done.stderr and 'pip install "corvid[plot]"' in done.stderr
