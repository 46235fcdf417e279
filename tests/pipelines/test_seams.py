"""The private names fastload uses are checked against the installed releases.

The installed versions are read from the environment (importlib.metadata), not from the
constants under test, so these fail when an install moves outside what the seams and
pyproject.toml state, or when a release drops one of the names.
"""

from __future__ import annotations

import ast
import importlib.metadata
import json
import pathlib
import subprocess
import sys

import pytest

from fastload.pipelines.seams import torch_private as torch_seams
from fastload.pipelines.seams.torch_private import SEAMS, SUPPORTED, UncheckedVersionError


@pytest.mark.parametrize("package", sorted(SUPPORTED))
def test_the_installed_release_is_one_the_seams_were_checked_on(package):
    version = importlib.metadata.version(package)
    assert torch_seams.check_version(package, version) == version
    low, high = SUPPORTED[package]
    assert torch_seams._release(version) == high, (
        f"{package} {version} is installed but the seams were checked on {high}")


@pytest.mark.parametrize("package", sorted(SUPPORTED))
def test_pyproject_allows_exactly_the_seams_range(package, dependency_ranges):
    low, high = SUPPORTED[package]
    assert dependency_ranges[package] == (low, (high[0], high[1] + 1))


@pytest.mark.parametrize("seam", SEAMS, ids=lambda s: s.path)
def test_every_private_name_resolves_on_the_installed_release(seam):
    if seam.package == "timm":
        pytest.importorskip("timm")
    torch_seams.resolve.cache_clear()
    assert torch_seams.resolve(seam.path) is not None
    assert seam.checked == ".".join(map(str, SUPPORTED[seam.package][1]))


def test_a_release_above_the_checked_one_is_refused_naming_the_range_and_the_fix():
    with pytest.raises(UncheckedVersionError,
                       match=r"torchvision 0\.30\.0 is installed.*checked on torchvision 0\.29"
                             r".*torchvision>=0\.16,<0\.30.*torch_seams\.py"):
        torch_seams.check_version("torchvision", "0.30.0")
    assert issubclass(UncheckedVersionError, ImportError)  # the loader falls back on it


def test_a_missing_private_name_is_named_with_its_package_and_use(monkeypatch):
    import torchvision.transforms.v2._utils as utils

    monkeypatch.delattr(utils, "_get_fill")
    torch_seams.resolve.cache_clear()
    try:
        with pytest.raises(UncheckedVersionError,
                           match=r"torchvision .* has no torchvision\.transforms\.v2\._utils"
                                 r"\._get_fill .*a v2 fill for one input type"):
            torch_seams.resolve("torchvision.transforms.v2._utils._get_fill")
    finally:
        torch_seams.resolve.cache_clear()


_UNCHECKED = r'''
import json, sys, warnings
import torchvision
torchvision.__version__ = "0.30.0"
from PIL import Image
from torchvision import transforms as T
from torchvision.datasets import ImageFolder
import fastload

root = sys.argv[1]
import os
os.makedirs(f"{root}/a", exist_ok=True)
Image.new("RGB", (20, 16)).save(f"{root}/a/0.jpg")
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    loader = fastload.DataLoader(ImageFolder(root, T.Compose([T.CenterCrop(8), T.ToTensor()])),
                                 batch_size=1)
    images, _ = next(iter(loader))
print(json.dumps({"warned": [str(w.message) for w in caught
                             if w.category.__name__ == "FallbackWarning"],
                  "shape": list(images.shape)}))
'''


@pytest.mark.slow
def test_the_loader_falls_back_with_one_warning_naming_an_unchecked_torchvision(tmp_path):
    done = subprocess.run([sys.executable, "-c", _UNCHECKED, str(tmp_path)], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(result["warned"]) == 1 and "torchvision 0.30.0 is installed" in result["warned"][0]
    assert result["shape"] == [1, 3, 8, 8]


# ---------------------------------------------------------------- no private name outside seams/
ROOT = pathlib.Path(__file__).parents[2]
_FOLDERS = ("fastload", "pipelines", "tools")  # the library's source (installed as fastload.*)
# Private names of the standard library and of packages outside the seams' remit that fastload
# reads on purpose, each with why (nothing of torch, torchvision, timm or DALI belongs here).
_ALLOWED = {
    "_replace": "namedtuple's documented method (its underscore avoids field names)",
    "_max_workers": "concurrent.futures pools keep no public worker count (getattr, default 1)",
    "_actions": "argparse has no public list of a parser's arguments (tools/ only)",
    "_fingerprint": "datasets has no public fingerprint (getattr, default ''); fastload.data "
                    "may not import pipelines' seams",
    "_gateway": "pyspark keeps the JVM it launched in SparkContext._gateway, and stop() keeps "
                "it running: ending the one launched for a local session has no public name "
                "(engines/on_spark.py; fastload.data may not import pipelines' seams)",
}


def _private(name: object) -> bool:
    return isinstance(name, str) and name.startswith("_") and not name.startswith("__")


def _sources() -> list[tuple[pathlib.Path, ast.AST]]:
    return [(path, ast.parse(path.read_text()))
            for folder in _FOLDERS for path in sorted((ROOT / folder).rglob("*.py"))]


def _own_names(trees: list[tuple[pathlib.Path, ast.AST]]) -> set[str]:
    """Every name fastload's own source defines or assigns (functions, classes, variables,
    attributes, arguments, import aliases, ``setattr`` names): a private attribute read
    outside these belongs to another package."""
    names = set()
    for _, tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
            elif isinstance(node, ast.arg):
                names.add(node.arg)
            elif isinstance(node, ast.alias):
                names.add(node.asname or node.name.split(".")[0])
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                  and node.func.id == "setattr" and len(node.args) > 1
                  and isinstance(node.args[1], ast.Constant)):
                names.add(node.args[1].value)
    return names


def _annotations(tree: ast.AST) -> set[ast.AST]:
    """Nodes inside annotations: never evaluated (``from __future__ import annotations``)."""
    found = set()
    for node in ast.walk(tree):
        parts = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            parts = [node.returns]
        elif isinstance(node, ast.arg):
            parts = [node.annotation]
        elif isinstance(node, ast.AnnAssign):
            parts = [node.annotation]
        for part in parts:
            if part is not None:
                found.update(ast.walk(part))
    return found


def _third_party(module: str) -> bool:
    top = module.split(".")[0]
    return top != "fastload" and top not in sys.stdlib_module_names


def _private_uses(path: pathlib.Path, tree: ast.AST, own: set[str]) -> list[str]:
    """The private third-party names ``path`` touches: imported (``from torch._x import y``,
    ``from timm.x import _y``), read off an imported module (``torchvision.x._y``), read off
    an object (``t._labels_getter``, a name fastload does not define), or named to
    ``getattr``/``hasattr``."""
    found = []
    modules: dict[str, str] = {}  # local name -> the third-party module it stands for
    stdlib: set[str] = set()  # local names of standard-library modules (os._exit is theirs)
    skipped = _annotations(tree)
    for node in ast.walk(tree):
        where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in sys.stdlib_module_names:
                    stdlib.add(alias.asname or alias.name.split(".")[0])
                elif _third_party(alias.name):
                    if any(map(_private, alias.name.split("."))):
                        found.append(f"{where} imports {alias.name}")
                    local = alias.asname or alias.name.split(".")[0]
                    modules[local] = alias.name if alias.asname else local
        elif isinstance(node, ast.ImportFrom) and not node.level and _third_party(node.module):
            for alias in node.names:
                if any(map(_private, node.module.split("."))) or _private(alias.name):
                    found.append(f"{where} imports {alias.name} from {node.module}")
                modules[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    for node in ast.walk(tree):
        if node in skipped:
            continue
        where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)}"
        if (isinstance(node, ast.Attribute) and _private(node.attr)
                and isinstance(node.ctx, ast.Load) and node.attr not in _ALLOWED):
            base = node.value
            while isinstance(base, ast.Attribute):
                base = base.value
            if isinstance(base, ast.Name) and base.id in stdlib:
                continue
            if isinstance(base, ast.Name) and base.id in modules:
                found.append(f"{where} reads {ast.unparse(node)} ({modules[base.id]})")
            elif node.attr not in own:
                found.append(f"{where} reads {ast.unparse(node)}")
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in ("getattr", "hasattr") and len(node.args) > 1
              and isinstance(node.args[1], ast.Constant) and _private(node.args[1].value)
              and node.args[1].value not in _ALLOWED
              and not (isinstance(node.args[0], ast.Name)
                       and (node.args[0].id in ("self", "cls") or node.args[0].id in stdlib))
              and node.args[1].value not in own):
            found.append(f"{where} asks {ast.unparse(node)}")
    return found


def test_no_module_outside_the_seams_touches_a_private_third_party_name():
    trees = _sources()
    own = _own_names(trees)
    found = [use for path, tree in trees if "seams" not in path.relative_to(ROOT).parts
             for use in _private_uses(path, tree, own)]
    assert not found, ("private names of other packages outside pipelines/seams/ (add a seam "
                       "there, or a public name): " + "; ".join(found))


@pytest.mark.parametrize("source, expected", [
    ("import torch._dynamo", "imports torch._dynamo"),
    ("from torchvision.transforms.v2._utils import get_x", "imports get_x"),
    ("from timm.data import _private", "imports _private"),
    ("import torchvision.transforms as T\nT.functional._private_fn", "reads T.functional"),
    ("def f(t):\n    return t._labels_getter", "reads t._labels_getter"),
    ("def f(m):\n    return hasattr(m, '_packed_params')", "asks hasattr"),
])
def test_the_private_name_finder_finds_each_kind_of_use(source, expected):
    path = ROOT / "pipelines" / "example.py"
    found = _private_uses(path, ast.parse(source), own=set())
    assert len(found) == 1 and expected in found[0], found


def test_the_private_name_finder_passes_own_names_annotations_and_the_allowed():
    source = ("import hashlib\nfrom typing import NamedTuple\n"
              "import os, argparse\n"
              "def f(x, pool, s: argparse._SubParsersAction) -> hashlib._Hash:\n"
              "    os._exit(0) if x else None\n"
              "    x._mine = 1\n    return x._mine, pool._max_workers, x._replace(a=1)\n")
    assert _private_uses(ROOT / "pipelines" / "example.py", ast.parse(source), {"_mine"}) == []
