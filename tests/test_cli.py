import json
import subprocess
import sys

from fp4spec.cli import main


def test_formats_lists_every_format(capsys):
    assert main(["formats"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 14 and out[0].startswith("e2m1") and "max=6" in out[0]


def test_table_markdown_has_every_code(capsys):
    assert main(["table", "e2m1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 + 16
    assert lines[2 + 7] == "| 0x7 | 0 | 11 | 1 | 6.0 |"


def test_table_csv_and_json(capsys):
    assert main(["table", "e8m0", "--output", "csv"]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert rows[0] == "code,hex,sign,exponent,mantissa,value" and len(rows) == 257
    assert rows[-1].endswith(",nan")
    assert main(["table", "int4", "--output", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["codes"][8]["value"] == -8.0


def test_usage_errors_exit_2(capsys):
    assert main([]) == 2
    try:
        main(["table", "e9m9"])
    except SystemExit as exc:
        assert exc.code == 2
    else:
        raise AssertionError("argparse should reject an unknown format")


def test_python_dash_m():
    out = subprocess.run([sys.executable, "-m", "fp4spec", "table", "e2m1", "--output", "csv"],
                         capture_output=True, text=True, check=True).stdout
    assert out.splitlines()[8].startswith("7,0x7,0,11,1,6.0")
