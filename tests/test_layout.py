"""The package layout's promises: one seam per framework internal, the core install without extras."""

from __future__ import annotations

import pytest

from fastload.pipelines.dali_backend import TESTED_DALI, check_dali_version


def test_dali_seam_accepts_the_tested_major_version():
    assert check_dali_version(f"{TESTED_DALI[0]}.{TESTED_DALI[1]}.7") == f"{TESTED_DALI[0]}.{TESTED_DALI[1]}.7"


def test_dali_seam_refuses_an_untested_major_version_naming_it():
    with pytest.raises(RuntimeError, match=r"nvidia-dali 9\.0\.0 is installed.*dali_backend\.py"):
        check_dali_version("9.0.0")
