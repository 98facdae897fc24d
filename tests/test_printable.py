"""collectors.printable: outside text printed can never forge a line."""

from collectors.printable import printable


def test_control_characters_are_escaped():
    assert printable("x\nerror: forged") == "x\\x0aerror: forged"
    assert printable("a\rb\x1b[31mc\x00") == "a\\x0db\\x1b[31mc\\x00"
    assert printable("bidi\u202eevil") == "bidi\\u202eevil"
    assert printable("Qwen/Qwen3-8B é 模型") == "Qwen/Qwen3-8B é 模型"  # letters of any script stay


def test_long_text_is_cut_with_a_count():
    assert printable("a" * 10, limit=4) == "aaaa…(6 more characters)"
    assert printable(12345) == "12345"
