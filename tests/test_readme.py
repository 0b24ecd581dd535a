"""The README's example runs and prints what its comments say."""

import contextlib
import io
import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_example_prints_its_comments():
    text = README.read_text()
    block = re.search(r"## Example\n\n```python\n(.*?)```", text, re.S).group(1)
    expected = [line.split("# ", 1)[1].strip() for line in block.splitlines()
                if line.startswith("print(") and "# " in line]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(block, "README.md", "exec"), {})
    printed = [line.strip() for line in out.getvalue().splitlines()]
    assert printed == expected
