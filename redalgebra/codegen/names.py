"""User names that the generated code could confuse with its own, and a cascade renamed away from them.

The generated kernels name their arguments after the cascade's inputs and params (``x``, ``q``) and
their registers after everything else with a prefix (``s_m``, ``e_x_0_1``, ``out_y``, ``rep_x``); the
derived programs name the two sides of a merge ``m_a``, ``m_b``. A user name can therefore collide
with the generator's — an input ``keep`` or ``row`` (the mask, the row index), ``rep_x`` (the
broadcast factor of ``x``), ``lambda`` (a Python keyword), ``out_y`` beside an output ``y``, ``m_a``
beside ``m`` — and a collision is a compile error at best and a wrong number at worst.

:func:`generated_names` finds the names that could collide and renames them (``u1``, ``u2``, …) in the
cascade as written, which is derived again; a kernel compiled from it maps its arguments and outputs
back, so the user never sees the generated names. Cascades whose names are all safe (the catalogue's)
are used as they are. :data:`BARE` and :data:`PREFIXES` list the generator's own identifiers; a test
scans generated kernels and holds these lists to them.
"""

from __future__ import annotations

import builtins
import keyword

from ..ir.lexer import tokenize
from ..ir.parser import parse

#: Identifiers without an underscore that the generated modules define or their kernels use.
BARE = frozenset("""
    BOUNDS CACHE NAN globals abs base bi bv combine config cuda e4m3 epilogue float32 grp gt hi int32 j keep kernel l
    lane length live lo math max min nch njit np nseg off oi ov part partial pick prange range red row rows
    seg seglen stride t tid u warp wsrc uint16 uint32
    cc ce cl cq d0 d1 gend grows rt inexact live seen it b0 b1 b2 b3 kb kcol krow lg lt ntile ntr qw sm smw split st tl
    u0 u1 v0 v1 vcol vrow sb
    lf rem bt ngrp lv tq sa fr fk wk wc segl rw kt0 fac a0 a1 a2 a3 cb kx fx lc r0 factors scalars tiles
    wcol wo wn wd wt sd b4 b5 b6 b7 li
    orow da db nn k0 wv wrow wcl c0
    nall tps tfirst cg ks wi wk smf xf dp
    fq nfull nmain nstep p0 p1 p2 p3 h0 h1 h2 h3 fo
    pp sp fresh uniform every op pe pf pk kz fma32
    mb nb nmb rest sg total tile nxt er0 ecb esg xp rsc sx half pend
    ptid pr pco pdo sf jt wgi n0 oc sh transpose col wf widen
    gw gi gm gq nsup
    LOG2E ex2 ml mo go cand nlive nopen bnan onan
    kt ct sub col0 colok l0 l1 l2 l3 l4 l5 l6 l7 sk eg gl wr wc8 wpr
    orc podd kc wl
    smc pa mk lr mrow nmr
""".split())
#: What comes before the first underscore of the generator's other identifiers (``s_m``, ``e_x_0_1``); ``gen_`` is
#: the generator's own loop and index names (``gen_k``), where a short bare name would take a user's (``k``, ``m``).
PREFIXES = frozenset("""
    D K NEG POS V acc c0 e fast fc0 full fv lane ld max min n o o1 o2 o3 oi ok out p part parti pv r red redi
    reduce rep rr rt s sh shfl shi si st t t0 tk tki v x xs xv y cp ldsm mma pack unpack cf fa pa pf rc row sc tr tx xb
    wgmma swizzle fence ce cc so div ga gb tq dk dv dq dl ac f e4m3 fo shk shki cv ci fd wo wd fp8 b16 fb wk wv BOUNDS
    grid prefetch z numba rv sv sqrt lds sts lv s0 s1 s2 s3 o0 bar kk lc lk nn ow tf
    tw regs tu zn warp pw0 pw1 ps pr axo fr xw
    gen cluster
""".split())


def _declared(c) -> list:
    """(name, appears bare in the kernels) of every name the cascade declares, sizes included."""
    out = [(s.name, type(s).__name__ in ("Input", "Param")) for s in c.statements if hasattr(s, "name")]
    return out + [(d, False) for d in dict.fromkeys(c.sizes.values()) if isinstance(d, str)]


def unsafe(c) -> list[str]:
    """The declared names of cascade ``c`` that the generated code could confuse with its own."""
    names = [n for n, _ in _declared(c)]
    out = []
    for name, bare in _declared(c):
        stem = name.split("_")[0]
        if (name.startswith("_") or keyword.iskeyword(name) or keyword.issoftkeyword(name)
                or (bare and (name in BARE or hasattr(builtins, name) or ("_" in name and stem in PREFIXES)))
                or any(name.startswith(other + "_") for other in names if other != name)):
            out.append(name)
    return out


def renamed_text(c, mapping: dict) -> str:
    """The cascade's text with the names of ``mapping`` replaced (token by token: never inside a name)."""
    lines = []
    for no, line in enumerate(str(c).splitlines(), 1):
        tokens = tokenize(line, no)
        pieces, pos = [], 0
        for tok in tokens[:-1]:
            start = tok.column - 1
            pieces.append(line[pos:start])
            pieces.append(mapping.get(tok.text, tok.text) if tok.kind == "name" else tok.text)
            pos = start + len(tok.text)
        pieces.append(line[pos:])
        lines.append("".join(pieces))
    return "\n".join(lines) + "\n"


def generated_names(fused):
    """``(fused, {user name: generated name})``: ``fused`` itself and ``{}`` when every name is safe,
    else the cascade as written with its unsafe names renamed, derived again (the unfused baseline's forms where it
    does not fuse: ``unfused`` derives when it can)."""
    from ..derive import unfused

    source = fused.source or fused.cascade
    bad = unsafe(source)
    if not bad:
        return fused, {}
    taken = {n for n, _ in _declared(source)} | BARE
    mapping, k = {}, 0
    for name in bad:
        k += 1
        while f"u{k}" in taken:
            k += 1
        mapping[name] = f"u{k}"
    renamed = parse(renamed_text(source, mapping), name=source.name)
    return unfused(renamed), mapping
