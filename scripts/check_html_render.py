#!/usr/bin/env python3
"""Checks what headless chromium made of a report (used by check-html.sh).

    check_html_render.py SCREENSHOT.png DOM.html CONSOLE.log [--min-charts N]

- the screenshot is a valid PNG that is not blank: several colours, and a fair share of pixels
  that are not the page background (decoded here with zlib; no imaging library needed);
- the DOM chromium built holds at least N <svg class="chart"> elements, each with a non-empty
  <title> and drawn marks (rect / circle / polyline / line) besides its background;
- the DOM has no <script> and the page fetched nothing (no src= / href= / url( );
- the browser log has no console message (the report has no JavaScript, so any console line is
  an error: a malformed SVG attribute, a failed load, ...).
Exits 1 with one line per problem.
"""
import argparse
import struct
import sys
import zlib
from html.parser import HTMLParser


def png_pixels(path):
    """(width, height, bytes per pixel, rows): rows are the unfiltered scanlines (bytes)."""
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG file")
    pos, idat, header = 8, [], None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
    width, height, depth, colour, _, _, interlace = header
    channels = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}[colour]
    if depth != 8 or interlace != 0:
        raise ValueError(f"unsupported PNG (bit depth {depth}, interlace {interlace})")
    bpp = channels
    raw = zlib.decompress(b"".join(idat))
    stride = width * bpp
    rows, prev = [], bytes(stride)
    for y in range(height):
        kind = raw[y * (stride + 1)]
        line = raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)]
        rows.append(unfilter(kind, line, prev, bpp))
        prev = rows[-1]
    return width, height, bpp, rows


def add_bytes(a, b):
    """Bytewise (a + b) mod 256 of two equally long byte strings, via big-integer SWAR."""
    n = len(a)
    x, y = int.from_bytes(a, "little"), int.from_bytes(b, "little")
    low = int.from_bytes(b"\x7f" * n, "little")
    high = int.from_bytes(b"\x80" * n, "little")
    s = ((x & low) + (y & low)) ^ ((x ^ y) & high)
    return s.to_bytes(n, "little")


def unfilter(kind, line, prev, bpp):
    if kind == 0:
        return bytes(line)
    if kind == 2:  # Up
        return add_bytes(line, prev)
    out = bytearray(line)
    n = len(out)
    if kind == 1:  # Sub
        for i in range(bpp, n):
            out[i] = (out[i] + out[i - bpp]) & 0xFF
    elif kind == 3:  # Average
        for i in range(n):
            left = out[i - bpp] if i >= bpp else 0
            out[i] = (out[i] + ((left + prev[i]) >> 1)) & 0xFF
    elif kind == 4:  # Paeth
        for i in range(n):
            a = out[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            p = a + b - c
            pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            out[i] = (out[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
    else:
        raise ValueError(f"bad PNG filter {kind}")
    return bytes(out)


class ChartScan(HTMLParser):
    """Collects per chart: its title text and how many marks it draws."""

    def __init__(self):
        super().__init__()
        self.charts, self.depth, self.in_title, self.scripts, self.fetches = [], 0, False, 0, []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "script":
            self.scripts += 1
        for key in ("src", "href"):
            if key in a:
                self.fetches.append(f"<{tag} {key}={a[key]}>")
        if "url(" in (a.get("style") or ""):
            self.fetches.append(f"<{tag} style=url(...)>")
        if tag == "svg" and "chart" in (a.get("class") or "").split():
            self.charts.append({"id": a.get("id", "?"), "title": "", "marks": 0})
            self.depth = 1
            return
        if self.depth > 0:
            self.depth += 1
            if tag == "title" and a.get("id", "").endswith("-title"):
                self.in_title = True
            if tag in ("rect", "circle", "polyline", "line", "path"):
                self.charts[-1]["marks"] += 1

    def handle_endtag(self, tag):
        if self.depth > 0:
            self.depth -= 1
            if tag == "title":
                self.in_title = False

    def handle_data(self, data):
        if self.in_title and self.charts:
            self.charts[-1]["title"] += data.strip()


def main():
    parser = argparse.ArgumentParser(description="Check a headless-chromium rendering of a report.")
    parser.add_argument("png")
    parser.add_argument("dom")
    parser.add_argument("log")
    parser.add_argument("--min-charts", type=int, default=1)
    args = parser.parse_args()
    png, dom, log, min_charts = args.png, args.dom, args.log, args.min_charts
    problems = []

    width, height, bpp, rows = png_pixels(png)
    background = rows[0][:bpp]
    colours, other = set(), 0
    for row in rows[::4]:  # every 4th row is plenty to tell a blank page from a drawn one
        for i in range(0, len(row), bpp * 2):
            px = row[i:i + bpp]
            colours.add(px)
            other += px != background
    sampled = (len(rows[::4])) * ((width + 1) // 2)
    print(f"screenshot {width}x{height}: {len(colours)} colours, {100.0 * other / sampled:.1f}% not background")
    if len(colours) < 8:
        problems.append(f"the screenshot has only {len(colours)} colours: the page did not render")
    if other < 0.01 * sampled:
        problems.append("the screenshot is (almost) one colour: the page did not render")

    scan = ChartScan()
    scan.feed(open(dom, encoding="utf-8").read())
    print(f"DOM: {len(scan.charts)} charts")
    if len(scan.charts) < min_charts:
        problems.append(f"{len(scan.charts)} <svg class=chart> in the DOM, expected at least {min_charts}")
    for c in scan.charts:
        # Every chart draws its background rect; a chart with data draws more.
        if c["marks"] < 3:
            problems.append(f"chart {c['id']} is empty ({c['marks']} marks)")
        if not c["title"]:
            problems.append(f"chart {c['id']} has no title")
    if scan.scripts:
        problems.append(f"{scan.scripts} <script> elements: the report must not need JavaScript")
    for f in scan.fetches:
        problems.append(f"the page refers to an external resource: {f}")

    for line in open(log, encoding="utf-8", errors="replace"):
        if ":CONSOLE" in line:
            problems.append("browser console: " + line.strip())

    for p in problems:
        print("FAIL: " + p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
