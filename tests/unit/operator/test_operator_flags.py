"""`leasecron operator` flags of the operator's missed-run and token-floor rules: a bad
duration is refused naming the flag and the value, before anything starts."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from leasecron.cli._operator import operator_command


@pytest.mark.parametrize("flag", ["--run-record-grace", "--floor-record-limit"])
def test_a_bad_duration_is_refused_naming_the_flag_and_the_value(flag: str) -> None:
    result = CliRunner().invoke(operator_command, [f"{flag}=soon"])
    assert result.exit_code == 2
    assert flag in result.output
    assert "'soon'" in result.output
