#!/usr/bin/env python3
"""Renders a clustersim HTML report without a browser, for docs: the report's SVG
charts in page order, with the timeline drawn from its embedded span data the way the
report's script draws it (first view: the whole run), stacked into one SVG page.

    python3 docs/tools/report_snapshot.py report.html page.svg
    python3 docs/tools/report_snapshot.py report.html page.png   # through librsvg and cairo
"""
import ctypes
import html
import json
import re
import sys

COLOURS_LANE_H = 14
LABEL = 170


def timeline_svg(data, width=900, max_lanes=40):
    lanes = data["lanes"][:max_lanes]
    end = data["end"] or 1.0
    h = 18 + COLOURS_LANE_H * len(lanes)
    sx = (width - LABEL) / end
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{h}">',
           f'<rect width="{width}" height="{h}" fill="#fff" stroke="#ccc"/>']
    for k in range(9):
        t = end * k / 8
        x = LABEL + t * sx
        label = f"{t / 1e3:.4g} ms" if t >= 1e3 else f"{t:.4g} us"
        if k < 8:
            out.append(f'<text x="{x + 2:.1f}" y="11" font-size="10">{label}</text>')
        out.append(f'<rect x="{x:.1f}" y="18" width="1" height="{h - 18}" fill="#eee"/>')
    s = data["spans"]
    for l, name in enumerate(lanes):
        y = 18 + l * COLOURS_LANE_H
        out.append(f'<text x="4" y="{y + 10}" font-size="10">{html.escape(name)}</text>')
    for i in range(0, len(s), 7):
        lane = s[i]
        if lane >= len(lanes):
            continue
        y = 18 + lane * COLOURS_LANE_H
        x = LABEL + s[i + 1] * sx
        w = max(0.5, s[i + 2] * sx)
        out.append(f'<rect x="{x:.2f}" y="{y + 2}" width="{w:.2f}" height="{COLOURS_LANE_H - 4}" '
                   f'fill="{data["colours"][s[i + 3]]}"/>')
    out.append("</svg>")
    return "".join(out), h


def main():
    src, dst = sys.argv[1], sys.argv[2]
    page = open(src, encoding="utf-8").read()
    title = re.search(r"<h1>(.*?)</h1>", page).group(1)
    parts = []  # (svg, height, heading)
    rows = re.findall(r"<tr><td>(.*?)</td><td class=\"num\">(.*?)</td></tr>", page.split("</table>")[0])[:12]
    for m in re.finditer(r"<h2>(.*?)</h2>|<svg .*?</svg>|<script type=\"application/json\" id=\"tl-data\">(.*?)</script>",
                         page, re.S):
        if m.group(1) is not None:
            parts.append((None, 26, html.unescape(m.group(1))))
        elif m.group(2) is not None:
            svg, h = timeline_svg(json.loads(m.group(2).replace("<\\/", "</")))
            parts.append((svg, h, None))
        else:
            svg = m.group(0)
            h = float(re.search(r'height="([0-9.]+)"', svg).group(1))
            parts.append((svg, h, None))
    y = 40
    body = [f'<text x="20" y="28" font-size="20" font-weight="bold">{title}</text>']
    summary = []
    for i, (k, v) in enumerate(rows):
        x = 20 + 460 * (i % 2)
        yy = 6 + 16 * (i // 2)
        summary.append(f'<text x="{x}" y="{yy + 12}" font-size="12">{k}</text>'
                       f'<text x="{x + 420}" y="{yy + 12}" font-size="12" text-anchor="end">{v}</text>')
    summary_h = 16 * ((len(rows) + 1) // 2) + 10
    for svg, h, heading in parts:
        if heading is not None:
            body.append(f'<text x="20" y="{y + 18}" font-size="15" font-weight="bold">{html.escape(heading)}</text>')
            if heading == "Summary":
                y += h
                body.append(f'<g transform="translate(0,{y})">' + "".join(summary) + "</g>")
                y += summary_h
                continue
        else:
            inner = re.sub(r"^<svg ", f'<svg x="20" y="{y}" ', svg, count=1)
            body.append(inner)
        y += h + 6
    out = (f'<svg xmlns="http://www.w3.org/2000/svg" width="960" height="{y + 20:.0f}" '
           f'font-family="DejaVu Sans, sans-serif"><rect width="100%" height="100%" fill="#fff"/>'
           + "".join(body) + "</svg>")
    if dst.endswith(".png"):
        svg_to_png(out, dst)
    else:
        open(dst, "w", encoding="utf-8").write(out)


def svg_to_png(svg, dst):
    """Rasterizes with librsvg and cairo (Debian: librsvg2-2), no browser needed."""
    rsvg = ctypes.CDLL("librsvg-2.so.2")
    cairo = ctypes.CDLL("libcairo.so.2")

    class Dim(ctypes.Structure):
        _fields_ = [("width", ctypes.c_int), ("height", ctypes.c_int), ("em", ctypes.c_double), ("ex", ctypes.c_double)]

    data = svg.encode("utf-8")
    rsvg.rsvg_handle_new_from_data.restype = ctypes.c_void_p
    rsvg.rsvg_handle_new_from_data.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_void_p]
    handle = rsvg.rsvg_handle_new_from_data(data, len(data), None)
    if not handle:
        raise SystemExit("librsvg could not read the page")
    dim = Dim()
    rsvg.rsvg_handle_get_dimensions.argtypes = [ctypes.c_void_p, ctypes.POINTER(Dim)]
    rsvg.rsvg_handle_get_dimensions(handle, ctypes.byref(dim))
    cairo.cairo_image_surface_create.restype = ctypes.c_void_p
    surface = cairo.cairo_image_surface_create(0, dim.width, dim.height)
    cairo.cairo_create.restype = ctypes.c_void_p
    cairo.cairo_create.argtypes = [ctypes.c_void_p]
    context = cairo.cairo_create(surface)
    rsvg.rsvg_handle_render_cairo.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    rsvg.rsvg_handle_render_cairo(handle, context)
    cairo.cairo_surface_write_to_png.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    if cairo.cairo_surface_write_to_png(surface, dst.encode()) != 0:
        raise SystemExit("cannot write " + dst)


if __name__ == "__main__":
    main()
