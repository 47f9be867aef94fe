// Package plot draws small line charts as PNG images for the scale harness.
//
// The scale harness measures things such as hub memory against the number of
// member clusters, or convergence time against the number of MyApps, and the
// results are published as pictures in docs/benchmarks.md. This package turns
// those measurements into a PNG without any external tools: it uses only the
// standard image packages and the fixed-size bitmap font from
// golang.org/x/image, so it builds anywhere Go does (no cgo).
//
// A Chart holds one or more Series of (X, Y) points. Render draws one or more
// charts side by side in a single image. Each chart gets a title, axes with
// "nice" tick values, axis labels and a legend. Points are drawn in order of X
// with a square marker at each point and a line joining them.
//
// Axis rules, so that charts are comparable:
//   - The Y axis starts at 0 unless a value is negative.
//   - The X axis starts at 0 when all X values are non-negative and the
//     smallest one is at most half the largest; otherwise it starts at the
//     smallest X value. If there is only one X value, it is put in the
//     middle of an axis that starts (or ends) at 0.
//   - Both axes are widened outwards to the nearest tick.
//
// Series i of every chart uses colour i of a fixed palette of 8 colours, so a
// series that appears in the same position in several charts keeps its
// colour (an empty series still uses up its colour). Series 9 to 16 reuse the
// colours with hollow markers. The legend sits in a box below the X axis.
package plot

import (
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// Point is one measurement.
type Point struct{ X, Y float64 }

// Series is one line on a chart.
type Series struct {
	Name   string  // legend text
	Points []Point // any order; drawn sorted by X, with a marker at each point and lines between
}

// Chart is one panel of the image.
type Chart struct {
	Title  string
	XLabel string
	YLabel string
	Series []Series
}

// Default panel size, used when Render is given 0 for the width or height.
const (
	defaultWidth  = 640
	defaultHeight = 420
)

// The smallest panel that still leaves room for the axes, labels and legend.
const (
	minWidth  = 200
	minHeight = 160
)

// palette holds the series colours. Series i uses palette[i%len(palette)].
// They are the "tab10" colours, which are easy to tell apart on white.
var palette = []color.RGBA{
	{0x1f, 0x77, 0xb4, 0xff}, // blue
	{0xd6, 0x27, 0x28, 0xff}, // red
	{0x2c, 0xa0, 0x2c, 0xff}, // green
	{0xff, 0x7f, 0x0e, 0xff}, // orange
	{0x94, 0x67, 0xbd, 0xff}, // purple
	{0x8c, 0x56, 0x4b, 0xff}, // brown
	{0xe3, 0x77, 0xc2, 0xff}, // pink
	{0x17, 0xbe, 0xcf, 0xff}, // cyan
}

// Colours for everything that is not data.
var (
	white      = color.RGBA{0xff, 0xff, 0xff, 0xff}
	textColor  = color.RGBA{0x22, 0x22, 0x22, 0xff}
	titleColor = color.RGBA{0x00, 0x00, 0x00, 0xff}
	axisColor  = color.RGBA{0x44, 0x44, 0x44, 0xff}
	gridColor  = color.RGBA{0xe4, 0xe4, 0xe4, 0xff}
	zeroColor  = color.RGBA{0xa8, 0xa8, 0xa8, 0xff}
	boxColor   = color.RGBA{0xb0, 0xb0, 0xb0, 0xff}
)

// Text metrics of the bitmap font.
var face = basicfont.Face7x13

const (
	lineHeight = 13 // face.Height
	ascent     = 11 // face.Ascent
)

// Layout constants, in pixels.
const (
	margin     = 10 // space between the panel edge and anything drawn
	tickLen    = 5  // length of a tick mark outside the axis
	tickGap    = 4  // gap between a tick mark and its label
	labelGap   = 8  // gap between tick labels and the axis label
	markerSize = 7  // side of a square marker
	swatchLen  = 22 // length of the line sample in the legend
	legendPad  = 6  // padding inside the legend box
	legendGap  = 16 // horizontal gap between legend entries
	legendRow  = 16 // height of one legend row
)

// Render draws the charts side by side into one PNG image and writes it to w.
// Each chart gets a panel of width x height pixels; 0 means the default of
// 640x420. Series with no finite points are left out (NaN and infinite
// coordinates are skipped), but a chart with no drawable point at all is an
// error that names the chart. Nothing is written to w when an error is
// returned, except for errors from w itself.
func Render(w io.Writer, width, height int, charts ...Chart) error {
	if len(charts) == 0 {
		return errors.New("plot: no charts to render")
	}
	if width == 0 {
		width = defaultWidth
	}
	if height == 0 {
		height = defaultHeight
	}
	if width < minWidth || height < minHeight {
		return fmt.Errorf("plot: panel size %dx%d is too small (minimum %dx%d)", width, height, minWidth, minHeight)
	}
	if width > math.MaxInt32/len(charts) {
		return fmt.Errorf("plot: image too wide (%d panels of %d pixels)", len(charts), width)
	}

	prepared := make([]preparedChart, len(charts))
	for i, c := range charts {
		p, err := prepare(c)
		if err != nil {
			return fmt.Errorf("plot: chart %s: %w", chartName(i, c), err)
		}
		prepared[i] = p
	}

	img := image.NewRGBA(image.Rect(0, 0, width*len(charts), height))
	draw.Draw(img, img.Bounds(), image.NewUniform(white), image.Point{}, draw.Src)
	for i, p := range prepared {
		panel := image.Rect(i*width, 0, (i+1)*width, height)
		if err := drawPanel(img, panel, p); err != nil {
			return fmt.Errorf("plot: chart %s: %w", chartName(i, charts[i]), err)
		}
	}
	return png.Encode(w, img)
}

// chartName names a chart in error messages: its title, or its position.
func chartName(i int, c Chart) string {
	if c.Title != "" {
		return strconv.Quote(c.Title)
	}
	return fmt.Sprintf("#%d (untitled)", i+1)
}

// preparedSeries is a series ready to draw: finite points only, sorted by X.
type preparedSeries struct {
	name   string
	index  int // position in Chart.Series, which picks the colour
	points []Point
}

// preparedChart is a chart with its drawable series and its axis ticks.
type preparedChart struct {
	chart  Chart
	series []preparedSeries
	xTicks []float64
	yTicks []float64
}

// prepare drops unusable points and empty series, sorts points by X and
// works out the axis ticks.
func prepare(c Chart) (preparedChart, error) {
	p := preparedChart{chart: c}
	minX, maxX := math.Inf(1), math.Inf(-1)
	minY, maxY := math.Inf(1), math.Inf(-1)
	for i, s := range c.Series {
		var pts []Point
		for _, pt := range s.Points {
			if !finite(pt.X) || !finite(pt.Y) {
				continue
			}
			pts = append(pts, pt)
			minX, maxX = math.Min(minX, pt.X), math.Max(maxX, pt.X)
			minY, maxY = math.Min(minY, pt.Y), math.Max(maxY, pt.Y)
		}
		if len(pts) == 0 {
			continue
		}
		slices.SortStableFunc(pts, func(a, b Point) int {
			switch {
			case a.X < b.X:
				return -1
			case a.X > b.X:
				return 1
			}
			return 0
		})
		p.series = append(p.series, preparedSeries{name: s.Name, index: i, points: pts})
	}
	if len(p.series) == 0 {
		return p, errors.New("no drawable points (every series is empty or has only NaN/Inf values)")
	}
	xlo, xhi := xRange(minX, maxX)
	ylo, yhi := yRange(minY, maxY)
	p.xTicks = niceTicks(xlo, xhi)
	p.yTicks = niceTicks(ylo, yhi)
	return p, nil
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// xRange picks the span the X axis must cover (before rounding to ticks).
func xRange(minX, maxX float64) (float64, float64) {
	if minX == maxX {
		// A single X value: put it in the middle of an axis that starts or
		// ends at 0.
		switch {
		case minX > 0:
			return 0, 2 * minX
		case minX < 0:
			return 2 * minX, 0
		default:
			return -1, 1
		}
	}
	if minX >= 0 && minX <= maxX/2 {
		minX = 0
	}
	return minX, maxX
}

// yRange picks the span the Y axis must cover: it always includes 0.
func yRange(minY, maxY float64) (float64, float64) {
	lo, hi := math.Min(minY, 0), math.Max(maxY, 0)
	if lo == hi { // every value is 0
		hi = 1
	}
	return lo, hi
}

// niceSteps are the mantissas allowed for a tick step.
var niceSteps = []float64{1, 2, 2.5, 5}

// niceTicks returns evenly spaced tick values covering lo..hi. The step is
// 1, 2, 2.5 or 5 times a power of ten, the first tick is at or below lo and
// the last at or above hi, and there are between 4 and 6 ticks (5 when
// possible). The first and last tick become the ends of the axis.
func niceTicks(lo, hi float64) []float64 {
	if !finite(lo) || !finite(hi) {
		return []float64{0, 1}
	}
	if lo > hi {
		lo, hi = hi, lo
	}
	if lo == hi {
		d := math.Abs(lo) / 2
		if d == 0 {
			d = 1
		}
		lo, hi = lo-d, hi+d
	}
	span := hi - lo
	exp := math.Floor(math.Log10(span))
	bestM, bestK, bestA, bestN := 0.0, 0.0, 0.0, 0
	bestScore, bestWaste := math.Inf(1), math.Inf(1)
	for k := exp - 2; k <= exp+1; k++ {
		for _, m := range niceSteps {
			step := m * math.Pow(10, k)
			// The small epsilon stops rounding noise (0.3/0.1 = 2.9999...)
			// from adding a tick.
			a := math.Floor(lo/step + 1e-9)
			b := math.Ceil(hi/step - 1e-9)
			n := int(b-a) + 1
			score := math.Abs(float64(n - 5))
			if n < 4 || n > 6 {
				score += 100
			}
			waste := (b - a) * step / span
			if score < bestScore || (score == bestScore && waste < bestWaste) {
				bestM, bestK, bestA, bestN = m, k, a, n
				bestScore, bestWaste = score, waste
			}
		}
	}
	ticks := make([]float64, bestN)
	for i := range ticks {
		// (a+i)*m is exact in binary, and so is a power of ten up to 1e22,
		// so multiplying or dividing by it gives the float closest to the
		// decimal tick value (no 0.30000000000000004).
		v := (bestA + float64(i)) * bestM
		if bestK >= 0 {
			v *= math.Pow(10, bestK)
		} else {
			v /= math.Pow(10, -bestK)
		}
		if v == 0 {
			v = 0 // no "-0"
		}
		ticks[i] = v
	}
	return ticks
}

// decimals returns how many digits after the decimal point are needed to
// write v exactly (up to 15).
func decimals(v float64) int {
	v = math.Abs(v)
	for d := 0; d < 15; d++ {
		s := v * math.Pow(10, float64(d))
		if math.Abs(s-math.Round(s)) <= 1e-9*math.Max(1, s) {
			return d
		}
	}
	return 15
}

// formatTick writes a tick value compactly: 0, 250, 1k, 2.5k, 10k, 1.5M,
// 0.25. step is the distance between ticks and decides how many decimals
// are needed; trailing zeros are dropped.
func formatTick(v, step float64) string {
	if math.Abs(v) < math.Abs(step)*1e-9 {
		return "0"
	}
	div, suffix := 1.0, ""
	switch av := math.Abs(v); {
	case av >= 1e12:
		div, suffix = 1e12, "T"
	case av >= 1e9:
		div, suffix = 1e9, "G"
	case av >= 1e6:
		div, suffix = 1e6, "M"
	case av >= 1e3:
		div, suffix = 1e3, "k"
	}
	d := max(decimals(step/div), decimals(v/div))
	if d > 6 {
		// Very small numbers: scientific notation, shortest form.
		return strconv.FormatFloat(v, 'g', -1, 64)
	}
	s := strconv.FormatFloat(v/div, 'f', d, 64)
	if strings.Contains(s, ".") {
		s = strings.TrimRight(s, "0")
		s = strings.TrimSuffix(s, ".")
	}
	if s == "-0" {
		s = "0"
	}
	return s + suffix
}

// tickLabels formats every tick.
func tickLabels(ticks []float64) []string {
	step := 1.0
	if len(ticks) > 1 {
		step = ticks[1] - ticks[0]
	}
	out := make([]string, len(ticks))
	for i, t := range ticks {
		out[i] = formatTick(t, step)
	}
	return out
}

// canvas draws into one panel of the image; nothing is drawn outside clip.
type canvas struct {
	img  *image.RGBA
	clip image.Rectangle
}

func (c *canvas) set(x, y int, col color.RGBA) {
	if (image.Point{x, y}).In(c.clip) {
		c.img.SetRGBA(x, y, col)
	}
}

func (c *canvas) fill(r image.Rectangle, col color.RGBA) {
	draw.Draw(c.img, r.Intersect(c.clip), image.NewUniform(col), image.Point{}, draw.Src)
}

// outline draws the 1-pixel border of r.
func (c *canvas) outline(r image.Rectangle, col color.RGBA) {
	c.fill(image.Rect(r.Min.X, r.Min.Y, r.Max.X, r.Min.Y+1), col)
	c.fill(image.Rect(r.Min.X, r.Max.Y-1, r.Max.X, r.Max.Y), col)
	c.fill(image.Rect(r.Min.X, r.Min.Y, r.Min.X+1, r.Max.Y), col)
	c.fill(image.Rect(r.Max.X-1, r.Min.Y, r.Max.X, r.Max.Y), col)
}

// thickLine draws a line about 2-3 pixels wide: a Bresenham line where every
// pixel is stamped with a small "+" shaped brush.
func (c *canvas) thickLine(x0, y0, x1, y1 int, col color.RGBA) {
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := 1, 1
	if x0 > x1 {
		sx = -1
	}
	if y0 > y1 {
		sy = -1
	}
	e := dx + dy
	for {
		c.set(x0, y0, col)
		c.set(x0+1, y0, col)
		c.set(x0-1, y0, col)
		c.set(x0, y0+1, col)
		c.set(x0, y0-1, col)
		if x0 == x1 && y0 == y1 {
			return
		}
		e2 := 2 * e
		if e2 >= dy {
			e += dy
			x0 += sx
		}
		if e2 <= dx {
			e += dx
			y0 += sy
		}
	}
}

// marker draws a filled square centred on (x, y). Series beyond the first
// round of the palette get a hollow square so that they stay distinct.
func (c *canvas) marker(x, y int, col color.RGBA, hollow bool) {
	h := markerSize / 2
	r := image.Rect(x-h, y-h, x+h+1, y+h+1)
	if hollow {
		r = r.Inset(-1)
		c.fill(r, col)
		c.fill(r.Inset(2), white)
		return
	}
	c.fill(r, col)
}

// textWidth is the width of s in pixels.
func textWidth(s string) int {
	return font.MeasureString(face, s).Ceil()
}

// fit shortens s with "..." until it is at most maxWidth pixels wide.
func fit(s string, maxWidth int) string {
	if textWidth(s) <= maxWidth {
		return s
	}
	for len(s) > 0 {
		_, size := utf8.DecodeLastRuneInString(s)
		s = s[:len(s)-size]
		if textWidth(s+"...") <= maxWidth {
			return s + "..."
		}
	}
	return ""
}

// text draws s with its left edge at x and its baseline at y.
func (c *canvas) text(x, y int, s string, col color.RGBA) {
	d := font.Drawer{
		Dst:  c.img.SubImage(c.clip).(*image.RGBA),
		Src:  image.NewUniform(col),
		Face: face,
		Dot:  fixed.P(x, y),
	}
	d.DrawString(s)
}

// textUp draws s rotated a quarter turn anticlockwise (reading upwards).
// left is the leftmost column used and bottom the lowest row.
func (c *canvas) textUp(left, bottom int, s string, col color.RGBA) {
	w := textWidth(s)
	if w == 0 {
		return
	}
	tmp := &canvas{img: image.NewRGBA(image.Rect(0, 0, w, lineHeight))}
	tmp.clip = tmp.img.Bounds()
	tmp.text(0, ascent, s, col)
	for sy := 0; sy < lineHeight; sy++ {
		for sx := 0; sx < w; sx++ {
			if px := tmp.img.RGBAAt(sx, sy); px.A != 0 {
				c.set(left+sy, bottom-sx, px)
			}
		}
	}
}

// legendEntry is one item of the legend with its position inside the box.
type legendEntry struct {
	name   string
	color  color.RGBA
	hollow bool
	x, row int
}

// layoutLegend places the legend entries in rows no wider than maxWidth and
// returns them with the size of the box.
func layoutLegend(series []preparedSeries, maxWidth int) ([]legendEntry, image.Point) {
	inner := maxWidth - 2*legendPad
	var entries []legendEntry
	x, row, widest := 0, 0, 0
	for _, s := range series {
		name := fit(s.name, inner-swatchLen-5)
		w := swatchLen + 5 + textWidth(name)
		if x > 0 && x+legendGap+w > inner {
			x, row = 0, row+1
		}
		if x > 0 {
			x += legendGap
		}
		entries = append(entries, legendEntry{
			name:   name,
			color:  palette[s.index%len(palette)],
			hollow: s.index/len(palette)%2 == 1,
			x:      x,
			row:    row,
		})
		x += w
		widest = max(widest, x)
	}
	size := image.Pt(widest+2*legendPad, (row+1)*legendRow+2*legendPad-(legendRow-lineHeight))
	return entries, size
}

// drawPanel draws one chart into the rectangle panel of img.
func drawPanel(img *image.RGBA, panel image.Rectangle, p preparedChart) error {
	c := &canvas{img: img, clip: panel}
	xLabels, yLabels := tickLabels(p.xTicks), tickLabels(p.yTicks)

	// Work out the plot frame from the space the text around it needs.
	yLabelWidth := 0
	for _, l := range yLabels {
		yLabelWidth = max(yLabelWidth, textWidth(l))
	}
	left := panel.Min.X + margin + yLabelWidth + tickGap + tickLen
	if p.chart.YLabel != "" {
		left += lineHeight + labelGap
	}
	// Leave room for half of the last X tick label to the right of the axis.
	right := panel.Max.X - max(margin, textWidth(xLabels[len(xLabels)-1])/2+4)
	top := panel.Min.Y + margin + lineHeight/2 // half a Y tick label sticks out above
	if p.chart.Title != "" {
		top = panel.Min.Y + margin + lineHeight + 10
	}
	entries, legendSize := layoutLegend(p.series, panel.Dx()-2*margin)
	bottom := panel.Max.Y - margin - legendSize.Y - 10 - tickLen - tickGap - lineHeight
	if p.chart.XLabel != "" {
		bottom -= labelGap + lineHeight
	}
	if right-left < 40 || bottom-top < 40 {
		return fmt.Errorf("panel %dx%d leaves no room for the plot area", panel.Dx(), panel.Dy())
	}

	// Map data coordinates to pixels.
	x0, x1 := p.xTicks[0], p.xTicks[len(p.xTicks)-1]
	y0, y1 := p.yTicks[0], p.yTicks[len(p.yTicks)-1]
	px := func(x float64) int {
		return left + int(math.Round((x-x0)/(x1-x0)*float64(right-left)))
	}
	py := func(y float64) int {
		return bottom - int(math.Round((y-y0)/(y1-y0)*float64(bottom-top)))
	}

	// Grid lines, then the zero line, then the axes.
	for _, t := range p.xTicks {
		x := px(t)
		c.fill(image.Rect(x, top, x+1, bottom), gridColor)
	}
	for _, t := range p.yTicks {
		y := py(t)
		c.fill(image.Rect(left, y, right+1, y+1), gridColor)
	}
	if y0 < 0 && y1 > 0 {
		y := py(0)
		c.fill(image.Rect(left, y, right+1, y+1), zeroColor)
	}
	c.fill(image.Rect(left, top, left+1, bottom+1), axisColor)
	c.fill(image.Rect(left, bottom, right+1, bottom+1), axisColor)

	// X ticks. Labels are thinned out (every 2nd, 3rd, ...) if they would
	// touch each other.
	xSpacing := float64(right-left) / float64(len(p.xTicks)-1)
	widest := 0
	for _, l := range xLabels {
		widest = max(widest, textWidth(l))
	}
	every := 1
	for float64(every)*xSpacing < float64(widest+8) && every < len(p.xTicks) {
		every++
	}
	for i, t := range p.xTicks {
		x := px(t)
		c.fill(image.Rect(x, bottom, x+1, bottom+tickLen+1), axisColor)
		if i%every != 0 {
			continue
		}
		w := textWidth(xLabels[i])
		lx := min(max(x-w/2, panel.Min.X+2), panel.Max.X-2-w)
		c.text(lx, bottom+tickLen+tickGap+ascent, xLabels[i], textColor)
	}

	// Y ticks, labels right-aligned against the tick marks.
	for i, t := range p.yTicks {
		y := py(t)
		c.fill(image.Rect(left-tickLen, y, left, y+1), axisColor)
		w := textWidth(yLabels[i])
		c.text(left-tickLen-tickGap-w, y+ascent/2-1, yLabels[i], textColor)
	}

	// Axis labels and title.
	if p.chart.XLabel != "" {
		s := fit(p.chart.XLabel, panel.Dx()-2*margin)
		w := textWidth(s)
		x := min(max((left+right)/2-w/2, panel.Min.X+margin), panel.Max.X-margin-w)
		c.text(x, bottom+tickLen+tickGap+lineHeight+labelGap+ascent, s, textColor)
	}
	if p.chart.YLabel != "" {
		// Keep the label beside the plot area so that it cannot run into
		// the legend below.
		s := fit(p.chart.YLabel, bottom-top)
		c.textUp(panel.Min.X+margin, (top+bottom)/2+textWidth(s)/2, s, textColor)
	}
	if p.chart.Title != "" {
		s := fit(p.chart.Title, panel.Dx()-2*margin)
		w := textWidth(s)
		x := min(max((left+right)/2-w/2, panel.Min.X+margin), panel.Max.X-margin-w)
		c.text(x, panel.Min.Y+margin+ascent, s, titleColor)
	}

	// Data: lines first, then markers on top, series in order.
	for _, s := range p.series {
		col := palette[s.index%len(palette)]
		for i := 1; i < len(s.points); i++ {
			a, b := s.points[i-1], s.points[i]
			c.thickLine(px(a.X), py(a.Y), px(b.X), py(b.Y), col)
		}
	}
	for _, s := range p.series {
		col := palette[s.index%len(palette)]
		hollow := s.index/len(palette)%2 == 1
		for _, pt := range s.points {
			c.marker(px(pt.X), py(pt.Y), col, hollow)
		}
	}

	// Legend, centred below the X axis label.
	box := image.Rectangle{Min: image.Pt(panel.Min.X+(panel.Dx()-legendSize.X)/2, panel.Max.Y-margin-legendSize.Y)}
	box.Max = box.Min.Add(legendSize)
	c.fill(box, white)
	c.outline(box, boxColor)
	for _, e := range entries {
		ex := box.Min.X + legendPad + e.x
		ey := box.Min.Y + legendPad + e.row*legendRow // top of the text line
		mid := ey + lineHeight/2
		c.fill(image.Rect(ex, mid-1, ex+swatchLen, mid+1), e.color)
		c.marker(ex+swatchLen/2, mid, e.color, e.hollow)
		c.text(ex+swatchLen+5, ey+ascent, e.name, textColor)
	}
	return nil
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}
