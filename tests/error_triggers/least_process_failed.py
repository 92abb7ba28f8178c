"""A multi-process collector whose worker dies (its env's _step raises in the worker)."""

SUBPROCESS = True

BODY = '''
class StepFails(TinyEnv):
    def _step(self, tensordict):
        raise ValueError("this env cannot step")


def make_env():
    return StepFails()
'''


def trigger():
    from _collector_script import run

    return run(BODY)
