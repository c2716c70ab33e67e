"""The pass/fail tally of kite's Python CLI tests: one line per check, a summary, exit 1 on any failure
(and on no check at all, so a test that ran nothing cannot pass)."""


class Tally:
    def __init__(self):
        self.passed = 0
        self.failed = 0

    def check(self, name, ok, detail=""):
        if ok:
            self.passed += 1
            print(f"ok   {name}")
        else:
            self.failed += 1
            print(f"FAIL {name}: {detail}")
        return ok

    def finish(self):
        print(f"{self.passed} passed, {self.failed} failed")
        raise SystemExit(1 if self.failed or not self.passed else 0)
