"""Neuroglancer itself -- the client the ``neuroglancer`` wheel bundles -- in headless Chromium.

Each case runs ``zvf neuroglancer serve`` or ``zvf neuroglancer export --serve``
as a user does, loads the viewer URL it prints (unchanged), waits on the
viewer's own chunk statistics (its ``isReady`` does not wait for annotation
chunks), reads the WebGL canvas and projects sample positions through the
3-D camera: drawn pixels must lie near at least 90 % of them.  No request may
fail (the server's request log; chunk requests come from a web worker the
page's network log does not see), nor may the console show an error; the
viewer's skeleton and mesh vertex counts per id must match the store's, an
annotation selected by id must come back whole, and filtering edges by a
segment must draw that segment's edges alone.

Needs Debian's ``chromium`` and ``chromedriver`` (``.ci/run`` installs them),
``selenium`` and ``neuroglancer`` (the ``test`` extra); nothing is downloaded.
Screenshots of failed checks are kept under ``$ZVF_ARTIFACTS`` (default: the
temp directory)/zvf-neuroglancer.
"""

from __future__ import annotations

import base64
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import quote, urlsplit

import numpy as np
import pytest

import zvf
from zvf.neuroglancer import annotations as ann

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
if CHROMIUM is None or CHROMEDRIVER is None:
    pytest.skip("needs Debian's chromium and chromedriver (apt-get install chromium chromium-driver)",
                allow_module_level=True)
webdriver = pytest.importorskip("selenium.webdriver", reason="needs selenium (the test extra)")
neuroglancer = pytest.importorskip("neuroglancer", reason="needs the neuroglancer wheel (the test extra)")
Image = pytest.importorskip("PIL.Image", reason="needs Pillow (a neuroglancer dependency)").open

ARTIFACTS = Path(os.environ.get("ZVF_ARTIFACTS", tempfile.gettempdir())) / "zvf-neuroglancer"
COVERAGE = 0.9
NEAR = 3  # pixels around a projected sample that count as near it
LIMIT = "40"  # annotations per spatial cell: small, so the viewer has to combine several levels

STATS = """
const done = arguments[arguments.length - 1];
(async () => {
  if (typeof viewer === 'undefined') return done(null);
  const stats = await viewer.chunkQueueManager.getStatistics();
  let visible = 0, pending = 0, failed = 0;
  for (const [, s] of stats) {  // [state][priority tier][memory statistic]; the visible tier is 0
    for (let state = 0; state < 8; ++state) {
      const n = s[(state * 3) * 3];
      visible += n;
      if (state >= 3 && state <= 5) pending += n;  // downloading, queued, new
      if (state === 6) failed += n;
    }
  }
  done({visible, pending, failed, ready: viewer.isReady()});
})();
"""

CAPTURE = """
const panel = [...viewer.display.panels].find(p => p.projectionParameters !== undefined);
viewer.display.draw();  // read in the same task as the draw: the drawing buffer is not preserved
const png = viewer.display.canvas.toDataURL('image/png');
const v = panel.renderViewport;
return {png, matrix: Array.from(panel.projectionParameters.value.viewProjectionMat),
        left: panel.canvasRelativeClippedLeft, top: panel.canvasRelativeClippedTop,
        width: v.logicalWidth, height: v.logicalHeight};
"""

OBJECTS = """
const out = {skeletons: {}, meshes: {}};
for (const managed of viewer.layerManager.managedLayers) {
  for (const layer of managed.layer.renderLayers) {
    const skeletons = layer.base && layer.base.source && layer.base.source.chunks;
    if (skeletons) for (const [id, chunk] of skeletons) out.skeletons[id] = [chunk.numVertices, chunk.numIndices / 2];
    const fragments = layer.source && layer.source.fragmentSource && layer.source.fragmentSource.chunks;
    if (fragments) for (const [key, chunk] of fragments) {
      const id = key.split('/')[0];
      out.meshes[id] = (out.meshes[id] || 0) + chunk.meshData.vertexPositions.length / 3;
    }
  }
}
return out;
"""

BY_ID = """
const [name, id, done] = arguments;
const source = viewer.layerManager.getLayerByName(name).layer.annotationStates.states[0].source;
const ref = source.getReference(id);
const poll = () => {
  if (ref.value === undefined) return setTimeout(poll, 50);
  const a = ref.value;
  done(a === null ? null : {id: a.id, type: a.type, point: Array.from(a.point || []),
       pointA: Array.from(a.pointA || []), pointB: Array.from(a.pointB || []),
       related: (a.relatedSegments || []).map(ids => Array.from(ids, String))});
};
poll();
"""


# ------------------------------------------------------------------ harness


@pytest.fixture(scope="module")
def viewer_url():
    """The wheel's bundled client, served by neuroglancer's own server on 127.0.0.1."""
    neuroglancer.set_server_bind_address("127.0.0.1")
    viewer = neuroglancer.Viewer()  # the server serves the client only while its viewer lives
    yield viewer.get_viewer_url()
    neuroglancer.stop()


@pytest.fixture(scope="module")
def browser():
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--use-angle=swiftshader",
                "--enable-unsafe-swiftshader", "--window-size=800,600"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_script_timeout(30)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def page(browser, viewer_url):
    """The browser with the viewer's code loaded once (a cold first page is slow; see UPSTREAM_RACE)."""
    warm = {"layers": [{"type": "annotation", "name": "warm", "source": "local://annotations"}]}
    open_url(browser, _state_url(viewer_url, warm), 1, "warm-up")
    browser.get_log("browser")
    return browser


class Server:
    """A ``zvf neuroglancer`` command serving until stopped; ``doc`` is what it printed (--json)."""

    def __init__(self, args: list[str], log: Path):
        self.log = log
        zvf_cli = [sys.executable, "-c", "from zvf.cli.main import main; raise SystemExit(main())"]
        with open(log, "w") as err:
            self.proc = subprocess.Popen([*zvf_cli, "neuroglancer", *args, "--port", "0", "--json", "--log-requests"],
                                         stdout=subprocess.PIPE, stderr=err, text=True)
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait(10)
            raise AssertionError(f"zvf neuroglancer {args[0]} printed nothing: {log.read_text()[-2000:]}")
        self.doc = json.loads(line)

    def requests(self) -> list[tuple[str, int]]:
        """(request line, status) of every request so far."""
        out = []
        for line in self.log.read_text().splitlines():
            head, _, status = line.rpartition(" ")
            if head.startswith(("GET ", "HEAD ", "OPTIONS ")) and status.isdigit():
                out.append((head, int(status)))
        return out

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def launch(tmp_path, viewer_url):
    servers: list[Server] = []

    def start(command: str, store: Path, *extra: str) -> Server:
        args = [command, str(store)]
        if command == "export":
            args += [str(tmp_path / f"{store.stem}-ng"), "--serve", "-q"]
        server = Server([*args, "--viewer", viewer_url, *extra], tmp_path / f"{command}-{store.stem}.log")
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


def _state_url(viewer_url: str, state: dict) -> str:
    return viewer_url + "#!" + quote(json.dumps(state), safe="")


def _artifact(browser, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    browser.save_screenshot(str(path))
    return path


UPSTREAM_RACE = "Cannot read properties of undefined (reading 'length')"
"""Neuroglancer 2.41's URL-hash writer can fire (its 400 ms maxWait) in the middle of restoring an annotation
layer and serialize it before ``localAnnotationRelationships`` is set (layer/annotation/index.ts toJSON); the
layer is then dropped with this message.  A restore that slow happens on a cold page on a loaded machine."""


def open_url(browser, url: str, layers: int, name: str) -> None:
    """Load ``url`` and wait until its ``layers`` layers exist; once more if the upstream race dropped them."""
    for attempt in range(2):
        browser.get("about:blank")
        browser.get(url)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            got = browser.execute_script("return typeof viewer === 'undefined' ? null : "
                                         "[viewer.layerManager.managedLayers.length, document.body.innerText]")
            if got and got[0] == layers:
                return
            if got and UPSTREAM_RACE in got[1] and attempt == 0:
                break
            time.sleep(0.1)
        else:
            raise AssertionError(f"{layers} layers expected, the viewer has {got and got[0]}: "
                                 f"{got and got[1][-300:]} ({_artifact(browser, name)})")
    raise AssertionError(f"the viewer dropped the layers twice ({_artifact(browser, name)})")


def wait_loaded(browser, name: str, timeout: float = 60.0) -> dict:
    """Until the viewer has visible chunks, none pending, for three polls in a row."""
    deadline, calm, stats = time.monotonic() + timeout, 0, None
    while time.monotonic() < deadline:
        stats = browser.execute_async_script(STATS)
        calm = calm + 1 if stats and stats["ready"] and stats["visible"] and not stats["pending"] else 0
        if calm >= 3:
            assert not stats["failed"], f"{stats['failed']} chunks failed ({_artifact(browser, name)})"
            return stats
        time.sleep(0.15)
    raise AssertionError(f"viewer not loaded after {timeout} s: {stats} ({_artifact(browser, name)})")


def coverage(browser, positions: np.ndarray) -> tuple[float, bytes]:
    """Fraction of ``positions`` (global coordinates) with a drawn pixel within NEAR pixels of their projection,
    and the canvas as PNG."""
    shot = browser.execute_script(CAPTURE)
    png = base64.b64decode(shot["png"].split(",", 1)[1])
    drawn = np.asarray(Image(io.BytesIO(png)))[..., :3].max(axis=2) > 40
    matrix = np.asarray(shot["matrix"], np.float64).reshape(4, 4).T  # column-major
    clip = np.c_[positions, np.ones(len(positions))] @ matrix.T
    ndc = clip[:, :3] / clip[:, 3:]
    x = np.rint(shot["left"] + (ndc[:, 0] + 1) / 2 * shot["width"]).astype(int)
    y = np.rint(shot["top"] + (1 - ndc[:, 1]) / 2 * shot["height"]).astype(int)
    pad = np.pad(drawn, NEAR)
    hits = [pad[b:b + 2 * NEAR + 1, a:a + 2 * NEAR + 1].any()
            if 0 <= a < drawn.shape[1] and 0 <= b < drawn.shape[0] else False for a, b in zip(x, y)]
    return (float(np.mean(hits)) if hits else 0.0), png


def _keep(browser, name: str, png: bytes) -> Path:
    path = _artifact(browser, name)
    (ARTIFACTS / f"{name}-canvas.png").write_bytes(png)
    return path


def assert_drawn(browser, positions: np.ndarray, name: str) -> float:
    """At least COVERAGE of ``positions`` drawn (the screenshots kept when not)."""
    got, png = coverage(browser, positions)
    print(f"coverage {name}: {got:.3f} of {len(positions)} positions")
    assert got >= COVERAGE, f"{name}: {got:.1%} of the positions drawn ({_keep(browser, name, png)})"
    return got


def assert_not_drawn(browser, positions: np.ndarray, name: str) -> None:
    got, png = coverage(browser, positions)
    assert got <= 1 - COVERAGE, f"{name}: {got:.1%} drawn where nothing should be ({_keep(browser, name, png)})"


def console_errors(browser, viewer_url: str) -> list[str]:
    """SEVERE console entries, except the bundled client's own calls to a Python server (its event stream,
    which a state in the URL leaves without a shared state) and its favicon."""
    origin = "{0.scheme}://{0.netloc}".format(urlsplit(viewer_url))
    return [e["message"] for e in browser.get_log("browser") if e["level"] == "SEVERE"
            and not e["message"].startswith((f"{origin}/events/", f"{origin}/favicon.ico"))]


def check_requests(server: Server) -> list[tuple[str, int]]:
    seen = server.requests()
    assert seen, "the viewer made no request"
    failed = [r for r in seen if r[1] >= 400]
    assert not failed, failed
    return seen


async def _store(path: Path) -> dict:
    async with await zvf.aio.open(str(path)) as ds:
        out = {"all": await ds.read_all()}
        if ds.geometry_type != "point_cloud":
            oids = await ds.object_ids()
            out["objects"] = dict(zip(oids.tolist(), await ds.read_objects(oids)))
        return out


async def show(command: str, store: Path, launch, browser, *extra: str) -> tuple[Server, dict]:
    """Run ``zvf neuroglancer <command>`` on ``store``, open the URL it printed, wait for the data; returns the
    server and what zvf reads from the store."""
    data = await _store(store)
    server = launch(command, store, *extra)
    name = f"{store.stem}-{command}"
    open_url(browser, server.doc["url"], len(server.doc["state"]["layers"]), name)
    wait_loaded(browser, name)
    return server, data


# ------------------------------------------------------------------ cases


@pytest.mark.parametrize("command", ["serve", "export"])
async def test_points_drawn_and_selected_by_id(command, stores, launch, page, viewer_url):
    server, data = await show(command, stores / "pts.zarrvectors", launch, page, "--limit", LIMIT)
    assert server.doc["url"].startswith(viewer_url)
    assert_drawn(page, data["all"].positions, f"points-{command}")
    async with await zvf.aio.open(str(stores / "pts.zarrvectors")) as ds, ds.iter_chunks(batch_chunks=1) as batches:
        first = None
        async for sel in batches:  # chunk 0: the first of the level's nonempty_chunks
            first = sel
            break
    aid = int(ann.point_ids(0, len(first))[3])
    one = page.execute_async_script(BY_ID, "points", str(aid))
    assert one is not None and np.array_equal(np.float32(one["point"]), first.positions[3])
    assert not console_errors(page, viewer_url)
    seen = check_requests(server)
    if command == "serve":
        assert any(f"/annotations/by_id/{aid} " in r[0] for r in seen)
        assert len({r[0].split("/")[2] for r in seen if "/spatial" in r[0]}) > 1  # several levels drawn


@pytest.mark.parametrize("command", ["serve", "export"])
async def test_streamlines_drawn(command, stores, launch, page, viewer_url):
    server, data = await show(command, stores / "sl.zarrvectors", launch, page, "--limit", LIMIT)
    assert_drawn(page, data["all"].positions, f"streamlines-{command}")
    oid, sel = next(iter(data["objects"].items()))
    one = page.execute_async_script(BY_ID, "streamlines", str(int(ann.line_ids(oid, 2)[1])))
    assert np.array_equal(np.float32(one["pointA"]), sel.positions[sel.edges[1, 0]])
    assert np.array_equal(np.float32(one["pointB"]), sel.positions[sel.edges[1, 1]])
    assert one["related"] == [[str(oid)]]
    assert not console_errors(page, viewer_url)
    check_requests(server)


@pytest.mark.parametrize("command", ["serve", "export"])
async def test_skeletons_as_skeletons_and_as_edges(command, stores, launch, page, viewer_url):
    server, data = await show(command, stores / "sk.zarrvectors", launch, page)
    state = server.doc["state"]
    assert [layer["name"] for layer in state["layers"]] == ["skeleton edges", "skeletons"]
    assert state["layers"][1]["segments"] == [str(o) for o in sorted(data["objects"])]
    counts = page.execute_script(OBJECTS)["skeletons"]
    assert counts == {str(o): [len(s), len(s.edges)] for o, s in data["objects"].items()}
    viewer = server.doc["url"].split("#")[0]
    for hidden, name in ((0, "skeletons"), (1, "edges")):  # each layer alone
        alone = json.loads(json.dumps(state))
        alone["layers"][hidden]["visible"] = False
        open_url(page, _state_url(viewer, alone), 2, f"skeletons-{name}-{command}")
        wait_loaded(page, f"skeletons-{name}-{command}")
        assert_drawn(page, data["all"].positions, f"skeleton {name}-{command}")
    # edges filtered by segment 1: its edges drawn, none of segment 0's away from them
    only = json.loads(json.dumps(state))
    only["layers"][0]["filterBySegmentation"] = ["object"]
    only["layers"][1].update(segments=["1"], visible=False)
    open_url(page, _state_url(viewer, only), 2, f"skeletons-filtered-{command}")
    wait_loaded(page, f"skeletons-filtered-{command}")
    one, zero = data["objects"][1].positions, data["objects"][0].positions
    apart = zero[np.min(np.linalg.norm(zero[:, None, :2] - one[None, :, :2], axis=2), axis=1) > 8]
    assert len(apart)
    assert_drawn(page, one, f"skeleton edges of segment 1-{command}")
    assert_not_drawn(page, apart, f"skeleton edges of segment 0-{command}")
    edge = page.execute_async_script(BY_ID, "skeleton edges", str(int(ann.line_ids(1, 3)[2])))
    sel = data["objects"][1]
    assert np.array_equal(np.float32(edge["pointA"]), sel.positions[sel.edges[2, 0]])
    assert edge["related"] == [["1"]]
    assert not console_errors(page, viewer_url)
    seen = check_requests(server)
    if command == "serve":
        assert any(r[0].startswith("GET /annotations/rel_object/1 ") for r in seen)
        assert any(r[0].startswith("GET /skeletons/segment_properties/info ") for r in seen)


@pytest.mark.parametrize("command", ["serve", "export"])
async def test_meshes_drawn(command, stores, launch, page, viewer_url):
    server, data = await show(command, stores / "mesh.zarrvectors", launch, page)
    assert [layer["name"] for layer in server.doc["state"]["layers"]] == ["meshes"]
    assert page.execute_script(OBJECTS)["meshes"] == {str(o): len(s) for o, s in data["objects"].items()}
    assert_drawn(page, data["all"].positions, f"meshes-{command}")
    assert not console_errors(page, viewer_url)
    check_requests(server)


async def test_utm_coordinates_shown_where_they_are(tmp_path, launch, page, viewer_url):
    """Points at UTM-sized coordinates (4.1e6) served with the default offset: the data travel as float32
    near 0 and the state's transform puts them back where they are."""
    rng = np.random.default_rng(4)
    positions = np.array([4.1e6, 5.3e5, 100.0]) + np.round(rng.uniform(0, 500, (400, 3)), 3)
    store = tmp_path / "utm.zarrvectors"
    await zvf.aio.write_points(str(store), positions, chunk_shape=(100.0,) * 3, dtype="float64")
    server, _ = await show("serve", store, launch, page)
    source = server.doc["state"]["layers"][0]["source"]
    assert [row[-1] for row in source["transform"]["matrix"]] == [4.1e6, 5.3e5, 100.0]
    assert_drawn(page, positions, "points at UTM coordinates-serve")
    assert not console_errors(page, viewer_url)
    check_requests(server)
