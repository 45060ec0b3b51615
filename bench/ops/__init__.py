"""One module per operator; each defines cases(rng) -> list[common.Case] at the DESIGN standard shapes."""
