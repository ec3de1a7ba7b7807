"""Body-system descriptions: the shipped documents, forward kinematics against hand computations and the SCARA
class, broken and hostile documents (each with the message it must give), and the SVG a dashboard animates."""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import tracemalloc
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from robotics.description import (
    MAX_BODIES,
    MAX_CHARS,
    MAX_DEPTH,
    BodyTree,
    DescriptionError,
    JointType,
    body_transform,
    format_number,
    parse,
    to_svg,
    transforms,
)
from robotics.kinematics.scara import Scara

BODIES = Path(__file__).resolve().parents[2] / "config" / "bodies"
SVG = "{http://www.w3.org/2000/svg}"


def load(name: str) -> BodyTree:
    return parse((BODIES / name).read_text(encoding="utf-8"))


# ---- the shipped descriptions ----------------------------------------------------------------------


def test_every_shipped_description_parses():
    names = sorted(p.name for p in BODIES.glob("*.xml"))
    assert names == ["pendulum.en.xml", "pendulum.xml", "scara.en.xml", "scara.xml",
                     "walker-flight.en.xml", "walker-flight.xml"]
    for name in names:
        tree = load(name)
        assert tree.dialect == ("english" if ".en." in name else "xsystel")
        assert tree.bodies


def test_pendulum_is_listing_1_a_carriage_carrying_a_hinged_pendulum():
    tree = load("pendulum.xml")
    assert tree.system_class == "ПСТОВ" and tree.warnings == ()
    carriage, pendulum = tree.bodies[1], tree.bodies[2]
    assert (carriage.joint, carriage.parent, carriage.children) == (JointType.PRISMATIC, None, (2,))
    assert (carriage.lower, carriage.upper) == (pytest.approx(-0.1), pytest.approx(0.1))
    assert (pendulum.joint, pendulum.parent) == (JointType.REVOLUTE, 1)
    assert pendulum.upper == pytest.approx(math.radians(160))


def test_walker_is_listing_2_a_free_hull_carrying_two_three_body_legs():
    tree = load("walker-flight.xml")
    assert tree.system_class == "ПДСТ"
    assert tree.roots == (1,)
    assert tree.bodies[1].children == (2, 5)
    assert [tree.bodies[n].parent for n in range(1, 8)] == [None, 1, 2, 3, 1, 5, 6]
    hull = tree.bodies[1]
    assert hull.joint is JointType.FREE and hull.origin == (0.0, 1.0)
    assert hull.lower == pytest.approx((0.0, 0.0, -math.pi / 2)) and hull.upper == pytest.approx((5.0, 3.0, math.pi / 2))
    # min/max bound the pole's coordinates; on q they move by the origin
    assert hull.q_lower == pytest.approx((0.0, -1.0, -math.pi / 2)) and hull.q_upper == pytest.approx((5.0, 2.0, math.pi / 2))
    assert all(tree.bodies[n].joint is JointType.REVOLUTE for n in range(2, 8))


def test_walker_as_printed_is_accepted_with_a_warning_per_typographic_quote():
    text = (BODIES / "walker-flight.xml").read_text(encoding="utf-8")
    tree = parse(text)
    assert len(tree.warnings) == 4
    for warning, line in zip(tree.warnings, (10, 11, 14, 15)):
        column = text.split("\n")[line - 1].index("”") + 1
        assert warning.startswith(f"line {line}, column {column}: attribute КП closed with a typographic quote ”")
    assert [tree.bodies[n].joint for n in (3, 4, 6, 7)] == [JointType.REVOLUTE] * 4


@pytest.mark.parametrize("stem", ["pendulum", "scara", "walker-flight"])
def test_english_version_describes_the_same_bodies(stem):
    xsystel, english = load(f"{stem}.xml"), load(f"{stem}.en.xml")
    assert english.warnings == ()
    assert list(xsystel.bodies) == list(english.bodies)
    for n, a in xsystel.bodies.items():
        b = english.bodies[n]
        assert (a.joint, a.origin, a.lower, a.upper, a.parent, a.children) == \
               (b.joint, b.origin, b.lower, b.upper, b.parent, b.children)


@settings(max_examples=200, deadline=None)
@given(q1=st.floats(-3.0, 3.0), q2=st.floats(-2.6, 2.6), q3=st.floats(-3.0, 3.0))
def test_scara_description_agrees_with_the_scara_class(q1, q2, q3):
    arm = Scara(0.3, 0.2)
    for name in ("scara.xml", "scara.en.xml"):
        x, y, theta = load(name).forward({1: q1, 2: q2, 3: q3})[3]
        assert (x, y) == pytest.approx(arm.forward((q1, q2)), abs=1e-12)
        assert theta == pytest.approx(q1 + q2 + q3)


def test_scara_description_limits_are_the_documented_ones():
    tree = load("scara.xml")
    assert [round(math.degrees(tree.bodies[n].upper)) for n in (1, 2, 3)] == [170, 150, 180]
    assert tree.bodies[3].end == "gripper" and tree.bodies[3].length == pytest.approx(0.05)


def test_walker_forward_by_hand():
    tree = load("walker-flight.xml")
    # hull moved by (0.1, 0.2) m from its pole (0, 1) and turned 0; thigh 2 turned +90°: it points along
    # -x (x → y, y → -x), so the knee 0.5 m down the thigh is at (0.1 - 0.5, 1.2)
    poses = tree.forward({1: (0.1, 0.2, 0.0), 2: math.pi / 2})
    assert poses[1] == pytest.approx((0.1, 1.2, 0.0))
    assert poses[3] == pytest.approx((-0.4, 1.2, math.pi / 2))
    assert poses[4] == pytest.approx((-0.9, 1.2, math.pi / 2))
    # the other leg hangs straight down (+y): hip, knee and ankle 0.5 m apart
    assert [poses[n][:2] for n in (5, 6, 7)] == [pytest.approx((0.1, 1.2)), pytest.approx((0.1, 1.7)),
                                                 pytest.approx((0.1, 2.2))]


def test_walker_hull_rotation_carries_both_legs():
    poses = load("walker-flight.en.xml").forward({1: (0.0, 0.0, -math.pi / 2)})
    # turned -90°: the body's y (down the legs) now points along +x
    assert poses[7] == pytest.approx((1.0, 1.0, -math.pi / 2))
    assert poses[4] == pytest.approx((1.0, 1.0, -math.pi / 2))


def test_pendulum_forward_by_hand():
    poses = load("pendulum.xml").forward({1: -0.08, 2: 1.0})
    assert poses == {1: pytest.approx((-0.08, 0.0, 0.0)), 2: pytest.approx((-0.08, 0.0, 1.0))}


def test_forward_with_no_q_is_the_drawn_configuration():
    assert load("scara.xml").forward() == {1: (0.0, 0.0, 0.0), 2: (0.3, 0.0, 0.0), 3: pytest.approx((0.5, 0.0, 0.0))}


# ---- joint values and limits ---------------------------------------------------------------------


def test_violations_name_the_body_and_its_range():
    tree = load("walker-flight.xml")
    assert tree.violations({2: 0.5, 3: -1.0, 1: (1.0, 0.5, 0.0)}) == []
    msgs = tree.violations({3: 0.2, 1: (1.0, 2.5, 0.0)})
    assert len(msgs) == 2
    assert msgs[0].startswith("body 3: joint value 0.2 rad is outside [-2.793, 0] rad")
    assert msgs[1].startswith("body 1: joint value (1, 2.5, 0)")


def test_prismatic_limits_bound_the_pole_not_the_displacement():
    tree = parse('<bodySystem><body number="1" joint="0" origin="100, 0" min="0" max="300"/></bodySystem>')
    body = tree.bodies[1]
    assert (body.q_lower, body.q_upper) == (pytest.approx(-0.1), pytest.approx(0.2))
    assert body.within_limits(0.2) and not body.within_limits(0.25) and body.within_limits(-0.1)


def test_missing_limits_are_unbounded_and_serialise_as_null():
    tree = parse('<bodySystem><body number="1" joint="2" origin="0 0" min="-10, -20"/></bodySystem>')
    body = tree.bodies[1]
    assert body.lower == pytest.approx((-0.01, -0.02)) and body.upper == (math.inf, math.inf)
    assert body.to_json()["upper"] == [None, None] and body.to_json()["lower"] == pytest.approx([-0.01, -0.02])


@pytest.mark.parametrize(
    "q, fragment",
    [
        ({9: 0.0}, "bodies that do not exist: [9]"),
        ({1: (0.0, 0.0)}, "body 1 (free): joint value must be (x, y, angle)"),
        ({2: "up"}, "body 2 (revolute): joint value must be a finite number"),
        ({2: math.nan}, "body 2 (revolute): joint value must be a finite number"),
        ({1: (0.0, 0.0, math.inf)}, "body 1 (free)"),
        ([0.0], "q must map body numbers"),
    ],
)
def test_fail__forward_rejects_bad_joint_values(q, fragment):
    with pytest.raises(ValueError, match=re.escape(fragment)):
        load("walker-flight.en.xml").forward(q)


def test_a_origin_outside_its_own_limits_is_accepted_with_a_warning():
    tree = parse('<bodySystem>\n<body number="1" joint="0" origin="500, 0" min="0" max="300"/></bodySystem>')
    assert tree.warnings == ("line 2: body 1: its pole origin lies outside min..max, so the drawn (home) "
                             "configuration breaks its limits (min/max bound the pole's coordinates in the base frame)",)


# ---- broken documents ----------------------------------------------------------------------------

E = "<bodySystem>{}</bodySystem>"
R = "<СистемаТел>{}</СистемаТел>"

BROKEN = [
    ("duplicate_number", E.format('<body number="1" joint="1"/>\n<body number="1" joint="1"/>'),
     "line 2, column 1: body 1: attribute number: number 1 is already the body at line 1"),
    ("duplicate_number_xsystel", R.format('<Тело номер="2" КП="1"/><Тело номер="2" КП="1"/>'),
     "body 2: attribute номер: number 2 is already the body at line 1"),
    ("unknown_joint_type", E.format('<body number="3" joint="hinge"/>'),
     "body 3: attribute joint: unknown joint type 'hinge' (expected 0–3 or prismatic, revolute, prismatic2, free)"),
    ("unknown_joint_digit", R.format('<Тело номер="3" КП="4"/>'),
     "body 3: attribute КП: unknown joint type '4' (expected 0–3 or ПКП1, ВКП, ПКП2, СКП)"),
    ("other_dialects_joint_name", R.format('<Тело номер="3" КП="revolute"/>'), "body 3: attribute КП: unknown joint"),
    ("min_above_max", E.format('<body number="2" joint="1" min="30" max="-30"/>'),
     "body 2: attributes min/max: min 30 > max -30"),
    ("min_above_max_in_y", E.format('<body number="2" joint="3" min="0, 9, 0" max="1, 1, 1"/>'),
     "body 2: attributes min/max: min 9 > max 1 (value 2)"),
    ("bad_coordinates_word", R.format('<Тело номер="1" КП="1" КПТ="0, один"/>'),
     "body 1: attribute КПТ: '0, один' is not 2 numbers (coordinates x, y in mm)"),
    ("bad_coordinates_count", E.format('<body number="1" joint="1" origin="0, 0, 0"/>'),
     "body 1: attribute origin: '0, 0, 0' is not 2 numbers"),
    ("bad_coordinates_nan", E.format('<body number="1" joint="1" origin="nan, 0"/>'),
     "body 1: attribute origin: 'nan, 0' is not 2 numbers"),
    ("bad_coordinates_huge", E.format('<body number="1" joint="1" origin="1e300, 0"/>'),
     "body 1: attribute origin: '1e300, 0' is not 2 numbers"),
    ("free_joint_limits_need_three", E.format('<body number="1" joint="3" min="0, 0"/>'),
     "body 1: attribute min: '0, 0' is not 3 numbers (x, y in mm and an angle in degrees)"),
    ("revolute_limit_needs_one", E.format('<body number="1" joint="1" max="10, 20"/>'),
     "body 1: attribute max: '10, 20' is not 1 number (an angle in degrees)"),
    ("missing_number", E.format('<body joint="1"/>'), "body at line 1: attribute number is missing"),
    ("missing_joint", E.format('<body number="4"/>'), "body 4: attribute joint is missing"),
    ("number_zero_is_the_ground", E.format('<body number="0" joint="1"/>'),
     "body 0: attribute number: '0' is not a whole number from 1 up (0 is the ground)"),
    ("number_not_integer", E.format('<body number="1.5" joint="1"/>'), "body 1.5: attribute number: '1.5' is not"),
    ("number_not_ascii_digits", E.format('<body number="٣" joint="1"/>'), "attribute number: '٣' is not"),
    ("number_below_base", E.format('<body number="3" joint="1"><body number="2" joint="1"/></body>'),
     "line 1, column 40: body 2: attribute number: a body's number must exceed its base's (3)"),
    ("unknown_attribute", E.format('<body number="1" joint="1" orgin="0, 0"/>'),
     "body 1: unknown attribute orgin (known: number, joint, origin, min, max, length, end)"),
    ("unknown_element", R.format('<Тело номер="1" КП="1"><связи/></Тело>'),
     "element <связи> is not part of the xsystel language (inside <СистемаТел> only <Тело> may appear)"),
    ("mixed_dialects", R.format('<body number="1" joint="1"/>'), "element <body> is not part of the xsystel"),
    ("unknown_root", '<systemOfBodies/>', "root element <systemOfBodies> is neither <СистемаТел>"),
    ("lowercase_root_of_the_prose", '<системаТел/>', "root element <системаТел> is neither"),
    ("root_attribute", '<bodySystem kind="x"/>', "<bodySystem>: unknown attribute kind (known: class)"),
    ("text_content", E.format('<body number="1" joint="1">arm</body>'), "unexpected text 'arm'"),
    ("negative_length", E.format('<body number="1" joint="1" length="-5"/>'), "body 1: attribute length: -5 mm is negative"),
    ("unknown_end", E.format('<body number="1" joint="1" end="hand"/>'),
     "body 1: attribute end: 'hand' is not one of gripper, bob, foot, none"),
    ("mismatched_tag", '<bodySystem>\n  <body number="1" joint="1">\n</bodySystem>',
     "line 3, column 3: not well-formed XML: mismatched tag"),
    ("typographic_quote_opening", R.format('<Тело номер="1" КП=”1”/>'),
     "line 1, column 32: not well-formed XML: not well-formed (invalid token)"),
    ("typographic_quote_and_another_error", R.format('<Тело номер="1" КП="1”/>\n<Тело>'),
     "not well-formed XML"),
    ("empty", "", "line 1, column 1: not well-formed XML: no element found"),
    ("two_roots", "<bodySystem/><bodySystem/>", "junk after document element"),
]


@pytest.mark.parametrize("name, text, fragment", BROKEN, ids=[b[0] for b in BROKEN])
def test_fail__broken_description(name, text, fragment):
    with pytest.raises(DescriptionError) as info:
        parse(text)
    assert fragment in str(info.value)


def test_columns_count_characters_not_utf8_bytes():
    text = R.format('<Тело номер="1" КП="1" ё="2"/>')
    with pytest.raises(DescriptionError, match=r"^line 1, column 13: body 1: unknown attribute ё"):
        parse(text)


def test_a_repaired_quote_is_only_tried_when_the_text_is_not_xml():
    # a value may hold a typographic quote followed by a space; well-formed text is never rewritten
    tree = parse('<bodySystem class="the ” arm"><body number="1" joint="1"/></bodySystem>')
    assert tree.system_class == "the ” arm" and tree.warnings == ()


def test_description_errors_are_value_errors():
    assert issubclass(DescriptionError, ValueError)


def test_fail__parse_takes_text_not_bytes():
    with pytest.raises(TypeError, match="str"):
        parse(b"<bodySystem/>")


def test_ok__byte_order_mark_comments_and_a_declared_foreign_encoding():
    text = ('\ufeff<?xml version="1.0" encoding="windows-1251"?>\n<!-- тело -->\n'
            '<СистемаТел><?render fast?><Тело номер="1" КП="ВКП"/></СистемаТел>')
    assert parse(text).bodies[1].joint is JointType.REVOLUTE


# ---- hostile documents ---------------------------------------------------------------------------

LAUGHS = ('<?xml version="1.0"?>\n<!DOCTYPE lolz [\n <!ENTITY lol "lol">\n'
          + "".join(f' <!ENTITY lol{i} "{("&lol" + (str(i - 1) if i > 1 else "") + ";") * 10}">\n' for i in range(1, 10))
          + ']>\n<bodySystem class="&lol9;"/>')

HOSTILE = [
    ("billion_laughs", LAUGHS, "line 2, column 16: a DOCTYPE is not allowed"),
    ("quadratic_blowup", '<!DOCTYPE b [<!ENTITY a "' + "x" * 50_000 + '">]><bodySystem class="' + "&a;" * 5000 + '"/>',
     "a DOCTYPE is not allowed"),
    ("external_entity_file", '<!DOCTYPE b [<!ENTITY x SYSTEM "file:///etc/passwd">]><bodySystem class="&x;"/>',
     "a DOCTYPE is not allowed"),
    ("external_dtd_url", '<!DOCTYPE bodySystem SYSTEM "http://127.0.0.1:9/evil.dtd"><bodySystem/>',
     "a DOCTYPE is not allowed"),
    ("parameter_entity", '<!DOCTYPE b [<!ENTITY % p SYSTEM "file:///etc/passwd"> %p;]><bodySystem/>',
     "a DOCTYPE is not allowed"),
    ("undeclared_entity", '<bodySystem class="&passwd;"/>', "not well-formed XML: undefined entity"),
    ("huge_document", "<bodySystem>" + " " * MAX_CHARS + "</bodySystem>",
     f"description is {MAX_CHARS + 25} characters long, more than the {MAX_CHARS} allowed"),
    ("deep_nesting", "<bodySystem>" + "".join(f'<body number="{i}" joint="1">' for i in range(1, 5001))
     + "</body>" * 5000 + "</bodySystem>", f"elements nest deeper than {MAX_DEPTH} levels"),
    ("deep_unknown_elements", "<bodySystem>" + "<a>" * 20000 + "</a>" * 20000 + "</bodySystem>",
     "element <a> is not part of the english language"),
    ("too_many_bodies", E.format("".join(f'<body number="{i}" joint="1"/>' for i in range(1, MAX_BODIES + 2))),
     f"more than {MAX_BODIES} bodies"),
    ("garbage_bytes", "".join(map(chr, np.random.default_rng(5).integers(1, 0x2FF, 3000))), "not well-formed XML"),
    ("nul_character", "<bodySystem>\x00</bodySystem>", "not well-formed XML"),
    ("lone_surrogate", "<bodySystem class='\udc80'/>", "description is not valid text"),
]


@pytest.mark.parametrize("name, text, fragment", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_fail__hostile_description_is_refused_without_growing(name, text, fragment):
    tracemalloc.start()
    try:
        with pytest.raises(DescriptionError) as info:
            parse(text)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert fragment in str(info.value)
    # nothing expands: the parse allocates a few times the text at most (a billion laughs would need GB)
    assert peak < 8 * len(text.encode("utf-8", "surrogatepass")) + 2_000_000, peak


def test_ok__nesting_up_to_the_limit_parses():
    depth = MAX_DEPTH - 1  # the root is one level
    text = E.format("".join(f'<body number="{i}" joint="1" origin="10, 0">' for i in range(1, depth + 1))
                    + "</body>" * depth)
    tree = parse(text)
    assert len(tree.bodies) == depth
    assert tree.forward()[depth] == pytest.approx((0.01 * depth, 0.0, 0.0))


# ---- SVG -----------------------------------------------------------------------------------------

SVG_ELEMENTS = {"svg", "title", "defs", "marker", "g", "path", "rect", "circle"}
SVG_ATTRIBUTES = {
    "svg": {"viewBox", "class", "role", "data-class"},
    "title": set(),
    "defs": set(),
    "marker": {"id", "markerUnits", "markerWidth", "markerHeight", "overflow", "orient"},
    "g": {"id", "class", "data-body", "data-joint", "transform", "fill", "stroke", "stroke-width", "stroke-linecap",
          "stroke-linejoin"},
    "path": {"id", "class", "d", "marker-start", "marker-mid", "marker-end", "fill", "stroke", "stroke-width"},
    "rect": {"x", "y", "width", "height", "fill", "stroke", "stroke-width"},
    "circle": {"r", "fill", "stroke", "stroke-width"},
}
PATH_DATA = re.compile(r"^(?:[MLHVhl]-?\d+(?:\.\d+)?(?: -?\d+(?:\.\d+)?)?\s*)+$")


@pytest.mark.parametrize("name", sorted(p.name for p in BODIES.glob("*.xml")))
def test_svg_is_well_formed_svg_made_of_known_elements_and_attributes(name):
    tree = load(name)
    root = ET.fromstring(to_svg(tree, y_up="scara" in name))
    assert root.tag == SVG + "svg"
    defined = {m.get("id") for m in root.iter(SVG + "marker")}
    for el in root.iter():
        assert el.tag.startswith(SVG), el.tag
        tag = el.tag[len(SVG):]
        assert tag in SVG_ELEMENTS, tag
        assert set(el.attrib) <= SVG_ATTRIBUTES[tag], (tag, set(el.attrib) - SVG_ATTRIBUTES[tag])
        for key in ("marker-start", "marker-mid", "marker-end"):
            if key in el.attrib:
                assert re.fullmatch(r"url\(#([\w-]+)\)", el.get(key)).group(1) in defined
        if tag == "path":
            assert PATH_DATA.match(el.get("d")), el.get("d")
    ids = [el.get("id") for el in root.iter() if el.get("id")]
    assert len(ids) == len(set(ids))
    assert [float(v) for v in root.get("viewBox").split()][2:] > [0, 0]


@pytest.mark.parametrize("name", ["walker-flight.xml", "scara.xml", "pendulum.en.xml"])
def test_svg_nests_one_group_per_body_like_the_bodies(name):
    tree = load(name)
    root = ET.fromstring(to_svg(tree))
    parent_of = {child: parent for parent in root.iter() for child in parent}
    groups = {int(g.get("data-body")): g for g in root.iter(SVG + "g") if g.get("data-body")}
    assert sorted(groups) == sorted(tree.bodies)
    for n, body in tree.bodies.items():
        g = groups[n]
        assert g.get("id") == f"body-{n}"
        assert g.get("class") == f"body joint-{body.joint.slug}"
        expected_parent = "ground" if body.parent is None else f"body-{body.parent}"
        assert parent_of[g].get("id") == expected_parent
        shape = g.find(SVG + "path")
        assert shape.get("id") == f"body-{n}-shape" and shape.get("class") == "shape"


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(-1.5, 1.5), min_size=9, max_size=9))
def test_moving_the_bodies_changes_only_the_transform_of_their_groups(values):
    tree = load("walker-flight.xml")
    q = {1: tuple(values[:3]), 2: values[3], 3: values[4], 4: values[5], 5: values[6], 6: values[7], 7: values[8]}
    still, moved = to_svg(tree), to_svg(tree, q)
    pattern = re.compile(r'(<g id="body-\d+"[^>]* transform=")[^"]*(")')
    assert pattern.sub(r"\1\2", still) == pattern.sub(r"\1\2", moved)
    for n, t in transforms(tree, q).items():
        assert f'<g id="body-{n}" ' in moved and f'transform="{t}">' in moved


def _compose(transform: str, pose):
    m = re.fullmatch(r"translate\((\S+) (\S+)\) rotate\((\S+)\)", transform)
    tx, ty, angle = (float(v) for v in m.groups())
    x, y, theta = pose
    c, s = math.cos(theta), math.sin(theta)
    return x + c * tx - s * ty, y + s * tx + c * ty, theta + math.radians(angle)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(-1.5, 1.5), min_size=9, max_size=9))
def test_svg_transforms_composed_down_the_tree_give_the_forward_poses(values):
    tree = load("walker-flight.en.xml")
    q = {1: tuple(values[:3]), 2: values[3], 3: values[4], 4: values[5], 5: values[6], 6: values[7], 7: values[8]}
    moves, poses = transforms(tree, q), tree.forward(q)
    composed = {}
    for n, body in tree.bodies.items():
        base = (0.0, 0.0, 0.0) if body.parent is None else composed[body.parent]
        composed[n] = _compose(moves[n], base)
        x_mm, y_mm, theta = composed[n]
        # strings carry 3 decimals of mm and degrees: 0.0005° over a 1.5 m lever, three levels deep, is 0.04 mm
        assert x_mm / 1000 == pytest.approx(poses[n][0], abs=1e-4)
        assert y_mm / 1000 == pytest.approx(poses[n][1], abs=1e-4)
        assert theta == pytest.approx(poses[n][2], abs=1e-4)


def test_body_transform_by_joint_type():
    tree = parse(E.format(
        '<body number="1" joint="0" origin="100, 50"><body number="2" joint="2" origin="10, 20">'
        '<body number="3" joint="3" origin="0, 0"><body number="4" joint="1" origin="300.5, 0"/></body></body></body>'))
    b = tree.bodies
    assert body_transform(b[1], 0.025) == "translate(125 50) rotate(0)"
    assert body_transform(b[2], (0.001, -0.002)) == "translate(11 18) rotate(0)"
    assert body_transform(b[3], (0.1, 0.2, -math.pi)) == "translate(100 200) rotate(-180)"
    assert body_transform(b[4], 1.0) == "translate(300.5 0) rotate(57.296)"
    assert body_transform(b[4]) == "translate(300.5 0) rotate(0)"


def test_y_up_flips_the_scene_for_top_views():
    svg = to_svg(load("scara.xml"), y_up=True)
    assert '<g id="scene" ' in svg and 'transform="scale(1 -1)"' in svg
    x, y, w, h = (float(v) for v in ET.fromstring(svg).get("viewBox").split())
    assert x < 0 < x + w and y < 0 < y + h


def test_svg_viewbox_holds_every_configuration_of_the_arm():
    tree = load("scara.xml")
    x, y, w, h = (float(v) for v in ET.fromstring(to_svg(tree)).get("viewBox").split())
    reach_mm = 550  # l1 + l2 + the 50 mm gripper
    assert x <= -reach_mm and y <= -reach_mm and x + w >= reach_mm and y + h >= reach_mm


def test_svg_marks_the_ground_carriage_guide_and_gripper():
    pendulum = to_svg(load("pendulum.en.xml"))
    assert 'id="body-1-ground" class="ground-mark"' in pendulum and 'marker-start="url(#marker-ground)"' in pendulum
    assert re.search(r'id="body-1-shape" class="shape" d="[^"]*" marker-start="url\(#marker-carriage\)"', pendulum)
    assert 'id="body-1-guide" class="guide" d="M-100 0 L100 0"' in pendulum
    assert re.search(r'id="body-2-shape" class="shape" d="M0 0 L300 0" marker-start="url\(#marker-hinge\)" '
                     r'marker-end="url\(#marker-bob\)"', pendulum)
    scara = to_svg(load("scara.xml"))
    assert re.search(r'id="body-3-shape" [^>]*marker-end="url\(#marker-gripper\)"', scara)
    walker = to_svg(load("walker-flight.xml"))
    assert "body-1-ground" not in walker  # in flight: no body touches the ground


def test_svg_escapes_the_system_class():
    svg = to_svg(parse('<bodySystem class="a&amp;&quot;&lt;b"><body number="1" joint="1"/></bodySystem>'))
    assert ET.fromstring(svg).get("data-class") == 'a&"<b'


# ---- numbers as the browser prints them ------------------------------------------------------------

# each pair checked with node: String(Number(v.toFixed(3)))
JS_PRINTS = [
    (0.0625, "0.063"), (-0.0625, "-0.063"), (1.0005, "1"), (-0.0005, "-0.001"), (0.00025, "0"),
    (-0.0004, "0"), (300.00000000000006, "300"), (12.3456, "12.346"), (1e-7, "0"), (-0.0, "0"),
    (2.5, "2.5"), (-1234.5678, "-1234.568"), (57.29577951308232, "57.296"), (0.1 + 0.2, "0.3"),
]


@pytest.mark.parametrize("value, expected", JS_PRINTS)
def test_format_number_prints_like_javascript(value, expected):
    assert format_number(value) == expected


def test_format_number_matches_node_on_random_values():
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: the fixed table above still runs")
    rng = np.random.default_rng(11)
    values = np.concatenate([rng.uniform(-2000, 2000, 2000), np.round(rng.uniform(-50, 50, 2000), 4),
                             rng.integers(-4000, 4000, 500) / 8000])
    script = "const v=JSON.parse(require('fs').readFileSync(0,'utf8'));" \
             "console.log(JSON.stringify(v.map(x=>String(Number(x.toFixed(3))))))"
    out = subprocess.run([node, "-e", script], input=json.dumps(values.tolist()), capture_output=True, text=True,
                         timeout=60, check=True).stdout
    js = json.loads(out)
    mismatches = [(v, p, j) for v, p, j in zip(values, (format_number(float(v)) for v in values), js) if p != j]
    assert not mismatches, mismatches[:5]


@pytest.mark.parametrize("value", [math.nan, math.inf])
def test_fail__format_number_refuses_non_finite(value):
    with pytest.raises(ValueError, match="non-finite"):
        format_number(value)
