"""What the structure checks (tests/structure/*.py) print and exit with, one way for all of them."""


def report(findings, passed, heading=None, summary=None, indent=""):
    """Prints the findings one a line, under `heading` and over `summary`, and returns exit status
    1; with none, prints `passed` and returns 0: a passing check says what it found clean."""
    if not findings:
        print(passed)
        return 0
    if heading:
        print(heading)
    for finding in findings:
        print(f"{indent}{finding}")
    if summary:
        print(summary)
    return 1
