"""A chart's rows are not copied while the chart is built: altair deep-copied every row of a
layered chart's inline data each time it was combined or given properties."""

from reports import charts


def test_a_layered_charts_rows_are_not_copied_while_it_is_built():
    area = [{"t": 1_700_000_000_000 + 60_000 * i, "role": "training", "w": 100.0 + i} for i in range(500)]
    envelope = [{"t": r["t"], "w": r["w"] + 5} for r in area]
    chart = charts.fleet_power(area, envelope, [{"label": "provisioned", "w": 900.0}], 60)
    stack, env = chart.layer[0], chart.layer[1]
    assert all(a is b for a, b in zip(stack.data.values, area, strict=True))
    assert all(a is b for a, b in zip(env.data.values, envelope, strict=True))
    assert chart.to_dict(validate=False)["layer"][0]["data"]["values"] == area  # the page embeds the same values
