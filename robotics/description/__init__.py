"""Planar body-system descriptions (seeds/001): parse the XML, compute poses, draw SVG.

A planar robot is a tree of bodies, each joined to its base by one of four joints
(prismatic, revolute, prismatic in x and y, free), written as nested XML
elements in the paper's XsysTel language (Cyrillic names) or its English
equivalent. :func:`parse` reads either from text (no I/O here) into a
:class:`BodyTree`; :meth:`BodyTree.forward` gives every body's pose;
:func:`to_svg` draws the tree as nested SVG groups whose ``transform`` carries
the joint, so a dashboard animates it by setting that one attribute
(:func:`body_transform` gives the exact string).

>>> tree = parse('''
... <СистемаТел класс="ПСТОВ">
...   <Тело номер="1" КП="0" КПТ="0,0" min="-100" max="100">
...     <Тело номер="2" КП="1" КПТ="0,0" min="-160" max="160"/>
...   </Тело>
... </СистемаТел>''')
>>> sorted(tree.bodies), tree.bodies[2].parent, tree.dialect
([1, 2], 1, 'xsystel')
>>> tree.forward({1: 0.05, 2: 1.5})[2]          # carriage 50 mm right, pendulum turned 1.5 rad
(0.05, 0.0, 1.5)
"""

from robotics.description.model import Body, BodyTree, JointType
from robotics.description.parser import MAX_BODIES, MAX_CHARS, MAX_DEPTH, DescriptionError, parse
from robotics.description.svg import body_transform, format_number, to_svg, transforms

__all__ = [
    "MAX_BODIES",
    "MAX_CHARS",
    "MAX_DEPTH",
    "Body",
    "BodyTree",
    "DescriptionError",
    "JointType",
    "body_transform",
    "format_number",
    "parse",
    "to_svg",
    "transforms",
]
