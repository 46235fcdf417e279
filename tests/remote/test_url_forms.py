"""A set at an S3 URL, as users write it: pathlib's one slash (``s3:/b/x``) and an upper-case
scheme name the same set; a script that read one exits without a word on stderr."""

from __future__ import annotations

import os
import subprocess
import sys

import fastload
from fastload.data.remote.url import canonical_url


def test_the_canonical_form_of_a_url_has_a_lower_case_scheme_and_two_slashes():
    assert canonical_url("s3:/bucket/x.set") == "s3://bucket/x.set"
    assert canonical_url("S3://bucket/x.set") == "s3://bucket/x.set"
    assert canonical_url("s3://bucket/x.set") == "s3://bucket/x.set"
    assert canonical_url("/local/s3") == "/local/s3"


def test_one_slash_and_an_upper_case_scheme_read_the_same_set(s3_env, s3_sharded_set):
    reference = fastload.LMDBDataset(s3_sharded_set)
    for written in (s3_sharded_set.replace("s3://", "s3:/"),
                    s3_sharded_set.replace("s3://", "S3://")):
        dataset = fastload.LMDBDataset(written)
        assert dataset.root == s3_sharded_set and dataset.targets == reference.targets
        assert dataset.reader.record(5) == reference.reader.record(5)


def test_a_script_that_read_an_s3_set_exits_without_output(s3_env, s3_sharded_set):
    script = ("import fastload\n"
              f"dataset = fastload.LMDBDataset({s3_sharded_set!r})\n"
              "dataset[0]\n")  # the dataset left for the interpreter's exit to collect
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=os.environ, timeout=120)
    assert done.returncode == 0 and done.stderr == ""
