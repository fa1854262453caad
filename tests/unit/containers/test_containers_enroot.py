"""enroot's start-up files, generated from an image config and executed with a real /bin/sh."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from mtk.containers.enroot import configure_rootfs, rc_script, up_to_date
from mtk.containers.pipeline import ImageError, output_path


def run_rc(config: dict, *args: str, tmp_path: Path) -> str:
    rc = tmp_path / "rc"
    rc.write_text(rc_script(config))
    return subprocess.run(["sh", str(rc), *args], capture_output=True, text=True, check=True, cwd=tmp_path).stdout


def test_rc_keeps_docker_semantics_and_quoting(tmp_path):
    config = {"Entrypoint": ["printf", "[%s]"], "Cmd": ["default arg", "it's"], "WorkingDir": str(tmp_path),
              "Labels": {"mtk.job": "tiny"}}
    assert run_rc(config, tmp_path=tmp_path) == "[default arg][it's]"  # no args: ENTRYPOINT + CMD
    assert run_rc(config, "a b", "$HOME", tmp_path=tmp_path) == "[a b][$HOME]"  # args replace CMD, verbatim
    assert rc_script(config).startswith("# mtk.job tiny\n")
    only_cmd = {"Cmd": ["printf", "%s", "x y"]}
    assert run_rc(only_cmd, tmp_path=tmp_path) == "x y"
    assert run_rc(only_cmd, "printf", "%s-", "z", tmp_path=tmp_path) == "z-"
    assert "exec /bin/sh" in rc_script({})


def test_rootfs_files_from_the_image_config(tmp_path):
    config = {"Env": ["PATH=/usr/local/bin:/usr/bin", "NCCL_NET_PLUGIN=ofi"], "Volumes": {"/data": {}},
              "WorkingDir": "/work", "Entrypoint": ["mtk-entrypoint"], "Cmd": ["--help"]}
    configure_rootfs(tmp_path, config)
    assert (tmp_path / "etc/environment").read_text() == "PATH=/usr/local/bin:/usr/bin\nNCCL_NET_PLUGIN=ofi\n"
    fstab = "${ENROOT_ROOTFS}/data /data none x-create=dir,bind,rw,nosuid,nodev\n"
    assert (tmp_path / "etc/fstab").read_text() == fstab
    rc = (tmp_path / "etc/rc").read_text()
    assert "cd /work &&" in rc and 'exec mtk-entrypoint "$@"' in rc and "exec mtk-entrypoint --help" in rc
    assert (tmp_path / "etc/rc.local").is_file() and (tmp_path / "work").is_dir()


def test_up_to_date_compares_with_the_image_time(tmp_path):
    sqsh = tmp_path / "x.sqsh"
    assert not up_to_date(sqsh, 0.0)
    sqsh.write_text("x")
    mtime = sqsh.stat().st_mtime
    assert up_to_date(sqsh, mtime - 10) and not up_to_date(sqsh, mtime + 10)


def test_sqsh_and_sif_paths_agree_with_the_spec(tmp_path):
    notes: list[str] = []
    assert output_path(None, "/fsx/a.sqsh", "image.sqsh", "sqsh", notes.append) is None
    assert output_path("", "/fsx/a.sqsh", "image.sqsh", "sqsh", notes.append) == Path("/fsx/a.sqsh")
    assert output_path("/fsx/a.sqsh", "/fsx/a.sqsh", "image.sqsh", "sqsh", notes.append) == Path("/fsx/a.sqsh")
    assert notes == []
    assert output_path("/fsx/b.sqsh", None, "image.sqsh", "sqsh", notes.append) == Path("/fsx/b.sqsh")
    assert "set image.sqsh: /fsx/b.sqsh" in notes[0]
    with pytest.raises(ImageError, match=r"differs from image.sqsh \(/fsx/a.sqsh\)"):
        output_path("/fsx/b.sqsh", "/fsx/a.sqsh", "image.sqsh", "sqsh", notes.append)
    with pytest.raises(ImageError, match=r"--sif needs a PATH, or set image\.sif"):
        output_path("", None, "image.sif", "sif", notes.append)
