"""People's names: one stored form (NFKC) and one comparison (NFKC, case-folded)."""

from __future__ import annotations

from signoff.domain.names import look_alike, name_key, normal_name


def test_compatibility_forms_are_stored_plain() -> None:
    assert normal_name("ｏｌｇａ") == "olga"
    assert normal_name("ﬁona") == "fiona"  # the ligature


def test_case_and_width_do_not_make_another_name() -> None:
    assert name_key("OLGA") == name_key("ｏｌｇａ") == name_key("olga")
    assert name_key("Straße") == name_key("STRASSE")
    assert look_alike("OLGA", ["olga", "rob"]) == "olga"
    assert look_alike("olga", ["olga"]) is None  # the same name is the same principal
    assert look_alike("olgaa", ["olga"]) is None


def test_other_scripts_stay_distinct() -> None:
    assert look_alike("оlga", ["olga"]) is None  # Cyrillic о: NFKC keeps it
