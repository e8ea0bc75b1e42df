"""compress.progress in a log (no terminal): bars would stay silent until their loop ends, so long loops print a
plain line at most every LOG_EVERY_S seconds instead."""
from compress import progress as pg


def test_logs_get_periodic_lines_instead_of_silent_bars(monkeypatch, capsys):
    assert not pg.console.is_terminal  # pytest captures stderr: the log case
    p = pg.Progress()
    monkeypatch.setattr(pg._LogLine, "LOG_EVERY_S", 3600.0)
    with p.callback("VPTQ") as update:
        update(1, 210, "model.layers.0.self_attn.q_proj: proxy loss 0.0061")
    assert capsys.readouterr().err == ""  # not due yet: short runs stay quiet
    monkeypatch.setattr(pg._LogLine, "LOG_EVERY_S", 0.0)
    with p.callback("VPTQ") as update:
        update(2, 210, "model.layers.0.self_attn.k_proj: proxy loss 0.0047")
    with p.task("perplexity", 148) as advance:
        advance()
    err = capsys.readouterr().err
    assert "VPTQ: 2/210 model.layers.0.self_attn.k_proj: proxy loss 0.0047" in err
    assert "perplexity: 1/148" in err
