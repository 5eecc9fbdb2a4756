"""Parity run: print which minirl functions were compared with verl, and how many times."""

from parity import COMPARED


def pytest_configure(config):
    # verl announces every GPU backend it cannot find; nothing to act on in a CPU parity run.
    config.addinivalue_line("filterwarnings", "ignore:.*engine is not available:UserWarning")


def pytest_terminal_summary(terminalreporter):
    if not COMPARED:
        return
    terminalreporter.section("minirl vs verl 0.9.1: functions compared", sep="=")
    width = max(map(len, COMPARED))
    for name, count in sorted(COMPARED.items()):
        terminalreporter.write_line(f"  {name.ljust(width)}  {count:5d} comparisons")
    terminalreporter.write_line(f"  {len(COMPARED)} outputs compared, {sum(COMPARED.values())} comparisons in all.")
