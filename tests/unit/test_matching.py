from fakegpu.profiles.matching import closest, did_you_mean, distance, normalise, suggestion_hint


def test_normalise() -> None:
    assert normalise("  NVIDIA A100_SXM4 80GB ") == "a100-sxm4-80gb"


def test_look_alike_characters_cost_less() -> None:
    assert distance("a10o", "a100") < distance("a10o", "a10")
    assert distance("h1oo", "h100") == 1.0


def test_closest_ranks_and_refuses_nonsense() -> None:
    assert closest("a10O", ["a10", "a100", "h100"])[0] == "a100"
    assert closest("completely-different", ["a100", "t4"]) == []
    assert closest("", ["a100"]) == []


def test_did_you_mean_names_the_close_match_quoted_in_parentheses() -> None:
    assert did_you_mean("a10O", ["a10", "a100", "h100"]) == " (did you mean 'a100'?)"
    assert did_you_mean("mixd", ["none", "single", "mixed"], quote=False) == " (did you mean mixed?)"
    assert did_you_mean("comand", ["command", "cwd"], paren=False) == "; did you mean 'command'?"


def test_did_you_mean_is_empty_when_nothing_is_close() -> None:
    assert did_you_mean("completely-different", ["a100", "t4"]) == ""
    assert did_you_mean("", ["a100"]) == ""
    assert did_you_mean("a100", []) == ""


def test_did_you_mean_offers_several_best_first() -> None:
    assert did_you_mean("3g.4gb", ["1g.10gb", "3g.40gb", "3g.20gb"], limit=2, quote=False) \
        == " (did you mean 3g.40gb or 3g.20gb?)"
    assert did_you_mean("3g.4gb", ["1g.10gb", "3g.40gb", "3g.20gb"]) == " (did you mean '3g.40gb'?)"


def test_did_you_mean_compares_candidates_normalised_and_shows_them_as_given() -> None:
    # an upper-case UUID or an underscored key is suggested as written, not in its compared form
    assert did_you_mean("gpu-1234abcd", ["GPU-1234ABCE"], quote=False) == " (did you mean GPU-1234ABCE?)"
    assert did_you_mean("exit_cod", ["exit_code", "stdout"]) == " (did you mean 'exit_code'?)"


def test_did_you_mean_shows_a_match_in_its_display_form() -> None:
    shown = {"board": "{board}", "count": "{count}"}
    assert did_you_mean("bord", ["board", "count"], quote=False, paren=False, shown=shown) == "; did you mean {board}?"
    # a dict of candidates is its keys, as everywhere in Python, whatever its values
    assert did_you_mean("bf61", {"fp16": "F16", "bf16": "BF16"}) == " (did you mean 'bf16'?)"


def test_suggestion_hint_formats_ranked_names() -> None:
    assert suggestion_hint([]) == ""
    assert suggestion_hint(["power.draw"], quote=False) == " (did you mean power.draw?)"
    assert suggestion_hint(["a", "b"], paren=False) == "; did you mean 'a' or 'b'?"
