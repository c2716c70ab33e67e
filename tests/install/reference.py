"""The float64 reference continuation of "Once upon a time" for the default model (reference_greedy.json
in the test data, computed by an independent NumPy forward pass)."""
import json
import os

DATA = os.environ.get("KITE_TEST_DATA", "../shared")
PROMPT = "Once upon a time"


def greedy_continuation():
    """The reference's decoded continuation after the prompt (its text repeats the prompt first)."""
    with open(os.path.join(DATA, "models", "reference_greedy.json")) as f:
        cases = json.load(f)["cases"]
    case = next(c for c in cases if c["model"].endswith("tinystories-656k-q8_0.gguf") and c["prompt"] == PROMPT)
    # Far from a near-tie, so an fp32 engine must pick the same tokens (see the file's note).
    assert case["min_margin"] > 1e-3, case["min_margin"]
    text = case["text"]
    assert text.startswith(" " + PROMPT), text
    return text[len(PROMPT) + 1:]


def check_story(stdout, what):
    """stdout of a greedy run of the default model on PROMPT: a non-empty prefix of the reference."""
    text = stdout.decode()
    story = text[:-1] if text.endswith("\n") else text
    reference = greedy_continuation()
    assert len(story) >= 40, (what, text)
    assert reference.startswith(story), (what, story, reference)
