"""Table-driven cases for the message language (docs/language.md), PADRES examples first."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from broker.language import ParseError, parse_composite, parse_filter, parse_publication
from broker.language.model import And, Atom, Composite, Or, Sequence

PARSERS: dict[str, Callable[[str], object]] = {
    "pub": parse_publication,
    "filter": parse_filter,
    "composite": parse_composite,
}

# (kind, text, canonical text)
VALID = [
    # PADRES examples
    ("filter", "[class,eq,'stock'],[price,=,100.3]", "[class,eq,stock],[price,=,100.3]"),
    ("pub", "[class,'stock'],[price,100.3]", "[class,stock],[price,100.3]"),
    ("filter", "[class,eq,stock],[symbol,str-prefix,'IB']", "[class,eq,stock],[symbol,str-prefix,IB]"),
    (
        "pub",
        "[class,stock],[symbol,IBM],[price,100.3],[volume,200],[note,'hello world']",
        "[class,stock],[note,'hello world'],[price,100.3],[symbol,IBM],[volume,200]",
    ),
    (
        "filter",
        "[class,eq,stock],[price,>,100],[symbol,str-prefix,'IB']",
        "[class,eq,stock],[price,>,100],[symbol,str-prefix,IB]",
    ),
    (
        "filter",
        "[class,eq,'stock'],[price,<,100],[amount,>,100]",
        "[class,eq,stock],[amount,>,100],[price,<,100]",
    ),
    ("pub", "[class,'stock'],[price,80]", "[class,stock],[price,80]"),
    # every string operator
    ("filter", "[class,eq,a],[s,eq,x]", "[class,eq,a],[s,eq,x]"),
    ("filter", "[class,eq,a],[s,neq,x]", "[class,eq,a],[s,neq,x]"),
    ("filter", "[class,eq,a],[s,str-lt,'m']", "[class,eq,a],[s,str-lt,m]"),
    ("filter", "[class,eq,a],[s,str-le,'m']", "[class,eq,a],[s,str-le,m]"),
    ("filter", "[class,eq,a],[s,str-gt,'m']", "[class,eq,a],[s,str-gt,m]"),
    ("filter", "[class,eq,a],[s,str-ge,'m']", "[class,eq,a],[s,str-ge,m]"),
    ("filter", "[class,eq,a],[s,str-postfix,'.xml']", "[class,eq,a],[s,str-postfix,'.xml']"),
    ("filter", "[class,eq,a],[s,str-contains,'b c']", "[class,eq,a],[s,str-contains,'b c']"),
    # every numeric operator
    ("filter", "[class,eq,a],[n,=,1]", "[class,eq,a],[n,=,1]"),
    ("filter", "[class,eq,a],[n,<>,1]", "[class,eq,a],[n,<>,1]"),
    ("filter", "[class,eq,a],[n,<,1]", "[class,eq,a],[n,<,1]"),
    ("filter", "[class,eq,a],[n,<=,1]", "[class,eq,a],[n,<=,1]"),
    ("filter", "[class,eq,a],[n,>,1]", "[class,eq,a],[n,>,1]"),
    ("filter", "[class,eq,a],[n,>=,-1]", "[class,eq,a],[n,>=,-1]"),
    # isPresent keeps only the type of its value
    ("filter", "[class,eq,a],[n,isPresent,5]", "[class,eq,a],[n,isPresent,0]"),
    ("filter", "[class,eq,a],[n,isPresent,-2.5]", "[class,eq,a],[n,isPresent,0]"),
    ("filter", "[class,eq,a],[n,isPresent,'any']", "[class,eq,a],[n,isPresent,'']"),
    ("filter", "[class,eq,a],[n,isPresent,word]", "[class,eq,a],[n,isPresent,'']"),
    # numbers
    ("pub", "[class,a],[n,+7]", "[class,a],[n,7]"),
    ("pub", "[class,a],[n,-3]", "[class,a],[n,-3]"),
    ("pub", "[class,a],[n,0]", "[class,a],[n,0]"),
    ("pub", "[class,a],[n,-0]", "[class,a],[n,0]"),
    ("pub", "[class,a],[n,120]", "[class,a],[n,120]"),
    ("pub", "[class,a],[n,.5]", "[class,a],[n,0.5]"),
    ("pub", "[class,a],[n,-10.9]", "[class,a],[n,-10.9]"),
    ("pub", "[class,a],[n,100.0]", "[class,a],[n,100]"),
    ("pub", "[class,a],[n,100.30]", "[class,a],[n,100.3]"),
    ("pub", "[class,a],[n,0.00001]", "[class,a],[n,0.00001]"),
    ("pub", "[class,a],[n,-.25]", "[class,a],[n,-0.25]"),
    ("pub", "[class,a],[n,9007199254740992]", "[class,a],[n,9007199254740992]"),
    # strings
    ("pub", "[class,a],[s,'']", "[class,a],[s,'']"),
    ("pub", '[class,a],[s,""]', "[class,a],[s,'']"),
    ("pub", '[class,a],[s,"it\'s"]', '[class,a],[s,"it\'s"]'),
    ("pub", "[class,a],[s,'say \"hi\"']", "[class,a],[s,'say \"hi\"']"),
    ("pub", "[class,a],[s,'a,b],[c']", "[class,a],[s,'a,b],[c']"),
    ("pub", "[class,a],[s,'ünïcødé ✓']", "[class,a],[s,'ünïcødé ✓']"),
    ("pub", "[class,a],[s,'123']", "[class,a],[s,'123']"),
    ("pub", "[class,a],[s,'x\ty']", "[class,a],[s,'x\ty']"),
    ("pub", "[class,a],[path,/usr/bin:x-y]", "[class,a],[path,/usr/bin:x-y]"),
    ("pub", "[class,a],[s,_under]", "[class,a],[s,_under]"),
    ("pub", "[class,a],[s,now]", "[class,a],[s,now]"),
    ("pub", "[class,a],[s,now-2h]", "[class,a],[s,now-2h]"),
    ("pub", "[class,a],[s,nowhere]", "[class,a],[s,nowhere]"),
    ("pub", "[class,a],[s,Times]", "[class,a],[s,Times]"),
    ("pub", "[class,a],[s,eq]", "[class,a],[s,eq]"),
    ("pub", "[class,'two words'],[x,1]", "[class,'two words'],[x,1]"),
    ("pub", "[class,a]", "[class,a]"),
    ("pub", "[class,a],[x-y,5]", "[class,a],[x-y,5]"),
    ("filter", "[class,eq,a]", "[class,eq,a]"),
    # whitespace between tokens is ignored, order of attributes is not meaningful
    ("pub", " [ class , a ] ,\t[ x , 1 ] ", "[class,a],[x,1]"),
    ("pub", "[class,a],[b,2],[a,1]", "[class,a],[a,1],[b,2]"),
    ("filter", "[class , eq , a] , [x , >= , 2]", "[class,eq,a],[x,>=,2]"),
    # time
    ("filter", "[class,eq,Trigger],[time,>,now-1h]", "[class,eq,Trigger],[time,>,now-1h]"),
    ("filter", "[class,eq,Trigger],[time,<,now+30m]", "[class,eq,Trigger],[time,<,now+30m]"),
    ("filter", "[class,eq,T],[time,>=,now-7200s]", "[class,eq,T],[time,>=,now-2h]"),
    ("filter", "[class,eq,T],[time,>=,now-90m]", "[class,eq,T],[time,>=,now-90m]"),
    ("filter", "[class,eq,T],[time,<=,now+2d]", "[class,eq,T],[time,<=,now+2d]"),
    ("filter", "[class,eq,T],[time,<=,now]", "[class,eq,T],[time,<=,now]"),
    ("filter", "[class,eq,T],[time,<=,now-0m]", "[class,eq,T],[time,<=,now]"),
    (
        "filter",
        "[class,eq,T],[time,>,'2026-10-01T12:00:00Z']",
        "[class,eq,T],[time,>,'2026-10-01T12:00:00Z']",
    ),
    (
        "filter",
        "[class,eq,T],[time,>,'2026-10-01T14:00:00+02:00']",
        "[class,eq,T],[time,>,'2026-10-01T12:00:00Z']",
    ),
    ("filter", "[class,eq,T],[time,>,'2026-10-01']", "[class,eq,T],[time,>,'2026-10-01T00:00:00Z']"),
    (
        "filter",
        "[class,eq,Trigger],[applname,eq,PAYROLL],[time,>,now-1h]",
        "[class,eq,Trigger],[applname,eq,PAYROLL],[time,>,now-1h]",
    ),
    # composites
    (
        "composite",
        "{{[class,eq,a],[x,eq,$S$X]}&{[class,eq,b],[x,eq,$S$X]}}",
        "{{[class,eq,a],[x,eq,$S$X]}&{[class,eq,b],[x,eq,$S$X]}}",
    ),
    ("composite", "{{[class,eq,b]}&{[class,eq,a]}}", "{{[class,eq,a]}&{[class,eq,b]}}"),
    ("composite", "{[class,eq,b]}&{[class,eq,a]}", "{{[class,eq,a]}&{[class,eq,b]}}"),
    ("composite", "{{[class,eq,a]}||{[class,eq,b]}}", "{{[class,eq,a]}||{[class,eq,b]}}"),
    ("composite", "{{[class,eq,a]};{[class,eq,b]}}", "{{[class,eq,a]};{[class,eq,b]}}"),
    ("composite", "{{[class,eq,b]};{[class,eq,a]}}", "{{[class,eq,b]};{[class,eq,a]}}"),
    ("composite", "{[class,eq,a]}", "{[class,eq,a]}"),
    ("composite", "{{{[class,eq,a]}}}", "{[class,eq,a]}"),
    (
        "composite",
        "{{{[class,eq,a]}&{[class,eq,b]}}&{[class,eq,c]}}",
        "{{[class,eq,a]}&{[class,eq,b]}&{[class,eq,c]}}",
    ),
    (
        "composite",
        "{{{[class,eq,a]}&{[class,eq,b]}}||{[class,eq,c]}}",
        "{{[class,eq,c]}||{{[class,eq,a]}&{[class,eq,b]}}}",
    ),
    (
        "composite",
        "{{{[class,eq,a]}||{[class,eq,b]}}&{[class,eq,c]}}",
        "{{[class,eq,c]}&{{[class,eq,a]}||{[class,eq,b]}}}",
    ),
    ("composite", "{{[class,eq,a]}&{[class,eq,a]}}", "{[class,eq,a]}"),
    (
        "composite",
        "{{[class,eq,a],[n,=,$I$N]}&{[class,eq,b],[m,=,$I$N]}}",
        "{{[class,eq,a],[n,=,$I$N]}&{[class,eq,b],[m,=,$I$N]}}",
    ),
    (
        "composite",
        "{{[class,eq,a],[n,=,$F$v]}||{[class,eq,b]}}",
        "{{[class,eq,a],[n,=,$F$v]}||{[class,eq,b]}}",
    ),
    (
        "composite",
        "Times({[class,eq,tick],[n,>,0]},3,n,1)",
        "Times({[class,eq,tick],[n,>,0]},3,n,1)",
    ),
    ("composite", "{Times({[class,eq,t]},5,seq,-0.5)}", "Times({[class,eq,t]},5,seq,-0.5)"),
    (
        "composite",
        "{Times({[class,eq,t]},2,n,1)&{[class,eq,u]}}",
        "{Times({[class,eq,t]},2,n,1)&{[class,eq,u]}}",
    ),
    (
        "composite",
        "{{{[class,eq,JOBSTATUS],[applname,eq,PAYROLL],[jobname,eq,JobA],[GID,eq,$S$X],"
        "[status,eq,SUCCESS]}||{[class,eq,JOBSTATUS],[applname,eq,PAYROLL],[jobname,eq,JobA],"
        "[GID,eq,$S$X],[status,eq,NORUN]}}&{[class,eq,Trigger],[applname,eq,PAYROLL],[GID,eq,$S$X]}}",
        "{{[class,eq,Trigger],[GID,eq,$S$X],[applname,eq,PAYROLL]}&"
        "{{[class,eq,JOBSTATUS],[GID,eq,$S$X],[applname,eq,PAYROLL],[jobname,eq,JobA],[status,eq,NORUN]}||"
        "{[class,eq,JOBSTATUS],[GID,eq,$S$X],[applname,eq,PAYROLL],[jobname,eq,JobA],[status,eq,SUCCESS]}}}",
    ),
    (
        "composite",
        " { { [class,eq,a] } & { [class,eq,b] } } ",
        "{{[class,eq,a]}&{[class,eq,b]}}",
    ),
]

# (kind, text, 1-based column, a fragment of the message)
INVALID = [
    ("pub", "", 1, "empty message"),
    ("pub", "   ", 1, "empty message"),
    ("filter", "", 1, "empty message"),
    ("pub", "[class,a],", 11, "unexpected end"),
    ("pub", "[class,a", 9, "unexpected end"),
    ("pub", "class,a", 1, "expected '['"),
    ("pub", "[class,a]]", 10, "expected ','"),
    ("pub", "[class,a];[b,1]", 10, "expected ','"),
    ("pub", "[price,1]", 2, "first attribute must be 'class'"),
    ("pub", "[x,1],[class,a]", 2, "first attribute must be 'class'"),
    ("pub", "[class,a],[class,b]", 12, "'class' must be the first"),
    ("pub", "[class,a],[x,1],[x,2]", 18, "appears more than once"),
    ("pub", "[class,5]", 8, "class must be a string"),
    ("pub", "[class,a],[x,007]", 14, "'007' is not a number"),
    ("pub", "[class,a],[x,01.5]", 14, "is not a number"),
    ("pub", "[class,a],[x,1.2.3]", 14, "is not a number"),
    ("pub", "[class,a],[x,5.]", 14, "is not a number"),
    ("pub", "[class,a],[x,1e5]", 14, "is not a number"),
    ("pub", "[class,a],[x,9007199254740993]", 14, "out of range"),
    ("pub", "[class,a],[x,0.1000000000000000055511151231257827]", 14, "more digits"),
    ("pub", "[class,a],[x,'abc]", 14, "unterminated string"),
    ("pub", '[class,a],[x,"abc]', 14, "unterminated string"),
    ("pub", "[class,a],[x,'a\nb']", 14, "unterminated string"),
    ("pub", "[class,a],[x,now+3m]", 14, "must be quoted"),
    ("pub", "[class,a],[time,5]", 12, "reserved"),
    ("pub", "[class,a],[9x,5]", 12, "expected an attribute name"),
    ("pub", "[class,a],[-x,5]", 12, None),  # names may contain '-' but not start with it
    ("pub", "[class,a],[x]", 13, "expected ','"),
    ("pub", "[class,a],[x,]", 14, "expected a value"),
    ("pub", "[class,a],[x,1,2]", 15, "expected ']'"),
    ("pub", "[class,a],[x,eq,1]", 16, "expected ']'"),
    ("pub", "[class,a],[x,$S$X]", 14, None),
    ("pub", "[class,a] [x,1]", 11, "expected ','"),
    ("pub", "[class,a],,[x,1]", 11, "expected '['"),
    ("filter", "[class,eq,stock],[price,100]", 25, "expected an operator after 'price'"),
    ("filter", "[class,eq,stock],[price]", 24, "expected ','"),
    ("filter", "[class,stock]", 13, "expected ','"),
    ("filter", "[price,>,1]", 2, "first attribute must be 'class'"),
    ("filter", "[class,>,1]", 8, "'class' must be compared with 'eq'"),
    ("filter", "[class,neq,a]", 8, "'class' must be compared with 'eq'"),
    ("filter", "[class,eq,a],[class,eq,b]", 15, "'class' must be the first"),
    ("filter", "[class,eq,a],[x,>,1],[x,<,5]", 23, "appears more than once"),
    ("filter", "[class,eq,a],[x,=,'abc']", 19, "needs a number"),
    ("filter", "[class,eq,a],[x,<,abc]", 19, "needs a number"),
    ("filter", "[class,eq,a],[x,eq,5]", 20, "needs a string"),
    ("filter", "[class,eq,a],[x,str-prefix,5]", 28, "needs a string"),
    ("filter", "[class,eq,a],[x,str-contains,1.5]", 30, "needs a string"),
    ("filter", "[class,eq,a],[x,foo,5]", 17, "unknown operator 'foo'"),
    ("filter", "[class,eq,a],[x,==,5]", 18, None),
    ("filter", "[class,eq,a],[x,!=,5]", 17, "unexpected character '!'"),
    ("filter", "[class,eq,a],[x,>]", 18, "expected ','"),
    ("filter", "[class,eq,a],[x,>,]", 19, "expected a value after '>'"),
    ("filter", "[class,eq,a],[x,eq,$S$X]", 20, "only in a composite"),
    ("filter", "[class,eq,a],[time,=,now]", 20, "'time' takes"),
    ("filter", "[class,eq,a],[time,>,5]", 22, "'time' takes"),
    ("filter", "[class,eq,a],[time,>,'yesterday']", 22, "is not a time"),
    ("filter", "[class,eq,a],[time,>,now-2y]", 22, None),
    ("filter", "[class,eq,a],[time,>,now-99999999999d]", 22, "within 365000d of now"),
    ("filter", "[class,eq,a],[time,<,now+365001d]", 22, "within 365000d of now"),
    ("filter", "[class,eq,a],[time,>,now-" + "9" * 5000 + "s]", 22, "within 365000d of now"),
    ("filter", "[class,eq,a],[x,>,now-1h]", 19, "needs a number"),
    ("filter", "[class,eq,a],[x,isPresent,$S$X]", 27, "only in a composite"),
    ("filter", "{[class,eq,a]}", 1, "expected '['"),
    ("composite", "", 1, "empty message"),
    ("composite", "[class,eq,a]", 1, None),
    ("composite", "{[class,eq,a]", 14, "unexpected end"),
    ("composite", "{[class,eq,a]}&", 16, "unexpected end"),
    ("composite", "{{[class,eq,a]}&&{[class,eq,b]}}", 17, None),
    ("composite", "{{[class,eq,a]}|{[class,eq,b]}}", 16, "unexpected character '|'"),
    ("composite", "{{[class,eq,a]}&{[class,eq,b]}||{[class,eq,c]}}", 31, "cannot mix"),
    ("composite", "{{[class,eq,a]}{[class,eq,b]}}", 16, None),
    ("composite", "{{[class,eq,a],[x,eq,$S$X]}&{[class,eq,b],[x,=,$I$X]}}", 48, "also used as"),
    ("composite", "{{[class,eq,a],[x,=,$S$X]}&{[class,eq,b]}}", 21, "needs the operator 'eq'"),
    ("composite", "{{[class,eq,a],[x,eq,$I$X]}&{[class,eq,b]}}", 22, "needs the operator '='"),
    ("composite", "{{[class,eq,a],[x,<,$F$X]}&{[class,eq,b]}}", 21, "needs the operator '='"),
    ("composite", "{{[class,eq,a],[x,eq,$Q$X]}&{[class,eq,b]}}", 22, None),
    ("composite", "Times({[class,eq,a]},0,n,1)", 22, "at least 1"),
    ("composite", "Times({[class,eq,a]},2.5,n,1)", 22, "whole number"),
    ("composite", "Times({[class,eq,a]},2,n)", 25, None),
    ("composite", "Times({[class,eq,a]},2,5,1)", 24, None),
    ("composite", "times({[class,eq,a]},2,n,1)", 1, None),
    ("composite", "{{[price,>,1]}&{[class,eq,b]}}", 4, "first attribute must be 'class'"),
    ("composite", "{" * 33 + "[class,eq,a]" + "}" * 33, 35, "may nest at most 32 levels"),
    ("composite", "{" * 3000 + "[class,eq,a]" + "}" * 3000, 3002, "may nest at most 32 levels"),
    ("composite", "Times(" * 33 + "{[class,eq,a]}" + ",2,n,1)" * 33, 201, "may nest at most 32 levels"),
    ("composite", "{" * 32 + "{[class,eq,a]}&{[class,eq,b]}" + "}" * 32, 35, "may nest at most 32 levels"),
]


def test_a_composite_may_nest_32_levels_however_it_was_built() -> None:
    deepest = "{" * 31 + "{[class,eq,a]}&{[class,eq,b]}" + "}" * 31
    assert parse_composite(deepest).depth == 2  # braces around one operand add nothing to the model
    node: Composite = Atom(parse_filter("[class,eq,a]"))
    for level in range(2, 33):  # alternately, so that nothing is flattened
        node = (And, Or)[level % 2]((node, Atom(parse_filter(f"[class,eq,b{level}]"))))
    assert node.depth == 32
    with pytest.raises(ValueError, match="may nest at most 32 levels"):
        Sequence((node, Atom(parse_filter("[class,eq,c]"))))


def test_table_is_large_enough() -> None:
    assert len(VALID) + len(INVALID) >= 100


@pytest.mark.parametrize(("kind", "text", "canonical"), VALID)
def test_valid(kind: str, text: str, canonical: str) -> None:
    parse = PARSERS[kind]
    parsed = parse(text)
    assert str(parsed) == canonical
    assert parse(canonical) == parsed
    assert hash(parse(canonical)) == hash(parsed)


@pytest.mark.parametrize(("kind", "text", "column", "fragment"), INVALID)
def test_invalid(kind: str, text: str, column: int, fragment: str | None) -> None:
    with pytest.raises(ParseError) as caught:
        PARSERS[kind](text)
    error = caught.value
    assert isinstance(error, ValueError)
    assert error.column == column, str(error)
    if fragment is not None:
        assert fragment in str(error)
    assert str(error).endswith(f"at column {column}")
    assert "\n" not in str(error)


def test_same_meaning_same_text() -> None:
    pairs = [
        (parse_publication("[class,'x'],[b,2.0],[a,'q']"), parse_publication('[class,x],[a,"q"],[b,2]')),
        (parse_filter("[class,eq,x],[n,>,+1]"), parse_filter("[class,eq,'x'],[n,>,1.0]")),
        (
            parse_composite("{{[class,eq,a]}&{{[class,eq,c]}&{[class,eq,b]}}}"),
            parse_composite("{[class,eq,b]}&{[class,eq,c]}&{[class,eq,a]}"),
        ),
    ]
    for left, right in pairs:
        assert left == right
        assert str(left) == str(right)


def test_publication_api() -> None:
    p = parse_publication("[class,stock],[price,100],[ratio,.5]")
    assert p["price"] == 100 and p.cls == "stock" and p["class"] == "stock"
    assert list(p) == ["class", "price", "ratio"]
    assert dict(p) == {"class": "stock", "price": 100, "ratio": 0.5}
    with pytest.raises(AttributeError):
        p.cls = "bond"  # type: ignore[misc]


def test_cached_filters_still_refuse_bad_text_every_time() -> None:
    """Filters and composites are cached by text; errors are not, and a variable refused in a
    plain filter is not admitted because the same text was parsed with variables allowed."""
    text = "[class,eq,a],[g,eq,$S$X]"
    assert parse_filter(text, allow_variables=True) is parse_filter(text, allow_variables=True)
    for _ in range(2):
        with pytest.raises(ParseError):
            parse_filter(text)
        with pytest.raises(ParseError):
            parse_composite("{[class,eq,a]}&")
        with pytest.raises(ParseError, match="expected a message text, not list"):
            parse_filter(["[class,eq,a]"])  # type: ignore[arg-type]
