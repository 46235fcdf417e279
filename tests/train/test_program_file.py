"""A ``.pt2`` program is checked before ``torch.export.load`` unpickles it: a member that holds
more than tensors is refused, named, and never run (fastload.train.program_file)."""

from __future__ import annotations

import io
import json
import zipfile

import pytest
import torch

from fastload.train.program_file import check_program_file
from fastload.train.quantize import load_program


class _Opens:
    """Unpickled, it creates the file ``path`` (what a crafted file's code could do)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


@pytest.fixture()
def program(tmp_path):
    path = tmp_path / "linear.pt2"
    model = torch.nn.Linear(3, 2)
    torch.export.save(torch.export.export(model, (torch.randn(1, 3),)), path)
    return path


def _rewrite(path, out, members: dict[str, bytes]) -> None:
    """``path`` copied to ``out`` with the members whose names end in a key replaced."""
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            new = [data for end, data in members.items() if info.filename.endswith(end)]
            dst.writestr(info.filename, new[0] if new else src.read(info.filename))


def _saved(obj) -> bytes:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def test_a_program_torch_wrote_loads_and_runs(program):
    check_program_file(program)
    assert load_program(program)(torch.ones(1, 3)).shape == (1, 2)


def test_code_in_the_example_inputs_is_refused_and_never_run(program, tmp_path):
    marker = tmp_path / "ran"
    crafted = tmp_path / "crafted.pt2"
    _rewrite(program, crafted, {"sample_inputs/model.pt": _saved(_Opens(str(marker)))})
    with pytest.raises(ValueError, match=r"crafted.pt2' holds '.*sample_inputs/model.pt', "
                                         r"which is more than tensors"):
        load_program(crafted)
    assert not marker.exists()


def test_a_pickled_weight_holding_code_is_refused_and_never_run(program, tmp_path):
    marker = tmp_path / "ran"
    with zipfile.ZipFile(program) as archive:
        name = next(n for n in archive.namelist() if n.endswith("model_weights_config.json"))
        config = json.loads(archive.read(name))
    first = next(iter(config["config"].values()))
    first["use_pickle"] = True
    crafted = tmp_path / "crafted.pt2"
    _rewrite(program, crafted, {"model_weights_config.json": json.dumps(config).encode(),
                                "weights/" + first["path_name"]: _saved(_Opens(str(marker)))})
    with pytest.raises(ValueError, match="which is more than tensors"):
        load_program(crafted)
    assert not marker.exists()


def test_a_custom_object_constant_is_refused(program, tmp_path):
    crafted = tmp_path / "crafted.pt2"
    config = {"config": {"obj": {"path_name": "custom_obj_0", "is_param": False,
                                 "use_pickle": True, "tensor_meta": None}}}
    _rewrite(program, crafted, {"model_constants_config.json": json.dumps(config).encode()})
    with pytest.raises(ValueError, match=r"holds a pickled Python object \('.*custom_obj_0'\)"):
        check_program_file(crafted)


def test_a_file_that_is_no_archive_is_refused_naming_it(tmp_path):
    path = tmp_path / "model.pt2"
    path.write_bytes(b"not a zip")
    with pytest.raises(ValueError, match="model.pt2' is not a .pt2 archive"):
        load_program(path)
