package plot

import (
	"bytes"
	"image"
	"image/color"
	"image/png"
	"math"
	"math/rand"
	"os"
	"slices"
	"strings"
	"testing"
)

// render calls Render and decodes the PNG it writes.
func render(t *testing.T, width, height int, charts ...Chart) image.Image {
	t.Helper()
	var buf bytes.Buffer
	if err := Render(&buf, width, height, charts...); err != nil {
		t.Fatalf("Render: %v", err)
	}
	img, err := png.Decode(&buf)
	if err != nil {
		t.Fatalf("decoding the PNG: %v", err)
	}
	return img
}

// countColor counts the pixels of exactly colour want inside r.
func countColor(img image.Image, r image.Rectangle, want color.RGBA) int {
	n := 0
	r = r.Intersect(img.Bounds())
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			if color.RGBAModel.Convert(img.At(x, y)).(color.RGBA) == want {
				n++
			}
		}
	}
	return n
}

func memoryChart() Chart {
	return Chart{
		Title:  "Hub memory",
		XLabel: "members",
		YLabel: "hub RSS (MiB)",
		Series: []Series{
			{Name: "hub RSS", Points: []Point{{50, 410}, {1, 120}, {10, 180}, {25, 260}}},
			{Name: "hub heap", Points: []Point{{1, 60}, {10, 95}, {25, 150}, {50, 240}}},
		},
	}
}

func convergenceChart() Chart {
	return Chart{
		Title:  "Convergence",
		XLabel: "MyApps",
		YLabel: "convergence time (s)",
		Series: []Series{
			{Name: "p50", Points: []Point{{100, 1.2}, {1000, 2.5}, {5000, 6.1}, {10000, 11.8}}},
			{Name: "p90", Points: []Point{{100, 2.0}, {1000, 4.1}, {5000, 9.5}, {10000, 17.2}}},
			{Name: "p99", Points: []Point{{100, 3.1}, {1000, 6.0}, {5000, 14.9}, {10000, 24.3}}},
		},
	}
}

func TestRenderTwoCharts(t *testing.T) {
	const w, h = 500, 360
	img := render(t, w, h, memoryChart(), convergenceChart())

	if got, want := img.Bounds(), image.Rect(0, 0, 2*w, h); got != want {
		t.Fatalf("image bounds = %v, want %v", got, want)
	}
	leftPanel := image.Rect(0, 0, w, h)
	rightPanel := image.Rect(w, 0, 2*w, h)

	// The background is white.
	if got := color.RGBAModel.Convert(img.At(1, 1)); got != white {
		t.Errorf("corner pixel = %v, want white", got)
	}

	// Both series of the left chart are drawn in the left panel, with
	// clearly more pixels than the legend swatch alone would give.
	for i := range 2 {
		if n := countColor(img, leftPanel, palette[i]); n < 150 {
			t.Errorf("left panel: series %d colour %v has %d pixels, want at least 150", i, palette[i], n)
		}
	}
	// The third colour is only used by the right chart.
	if n := countColor(img, leftPanel, palette[2]); n != 0 {
		t.Errorf("left panel: colour of series 2 has %d pixels, want 0", n)
	}
	for i := range 3 {
		if n := countColor(img, rightPanel, palette[i]); n < 150 {
			t.Errorf("right panel: series %d colour %v has %d pixels, want at least 150", i, palette[i], n)
		}
	}

	// The first left series rises to the top right: its colour must show up
	// in the top-right quarter of the left panel and in its lower-left part.
	topRight := image.Rect(w/2, 0, w, h/2)
	if n := countColor(img, topRight, palette[0]); n == 0 {
		t.Errorf("series 0 colour missing from the top-right quarter of the left panel")
	}
	lowerLeft := image.Rect(0, h/2, w/2, h)
	if n := countColor(img, lowerLeft, palette[0]); n == 0 {
		t.Errorf("series 0 colour missing from the lower-left quarter of the left panel")
	}

	// There is text (dark pixels) in both panels.
	for _, r := range []image.Rectangle{leftPanel, rightPanel} {
		if n := countColor(img, r, textColor); n < 200 {
			t.Errorf("panel %v has %d text pixels, want at least 200", r, n)
		}
	}
}

func TestRenderDefaultSize(t *testing.T) {
	img := render(t, 0, 0, memoryChart())
	if got, want := img.Bounds(), image.Rect(0, 0, defaultWidth, defaultHeight); got != want {
		t.Fatalf("image bounds = %v, want %v", got, want)
	}
}

func TestRenderErrors(t *testing.T) {
	empty := Chart{Title: "Nothing here", Series: []Series{{Name: "a"}, {Name: "b", Points: []Point{{math.NaN(), 1}, {2, math.Inf(1)}}}}}
	var buf bytes.Buffer
	err := Render(&buf, 0, 0, memoryChart(), empty)
	if err == nil {
		t.Fatal("Render with a chart without points: want an error, got nil")
	}
	if !strings.Contains(err.Error(), `"Nothing here"`) {
		t.Errorf("error %q does not name the chart", err)
	}
	if buf.Len() != 0 {
		t.Errorf("Render wrote %d bytes despite the error", buf.Len())
	}

	err = Render(&buf, 0, 0, memoryChart(), Chart{})
	if err == nil || !strings.Contains(err.Error(), "#2") {
		t.Errorf("untitled chart without points: error %v should name chart #2", err)
	}

	if err := Render(&buf, 0, 0); err == nil {
		t.Error("Render with no charts: want an error")
	}
	if err := Render(&buf, 50, 50, memoryChart()); err == nil {
		t.Error("Render with a tiny panel: want an error")
	}
	if err := Render(&buf, -1, 0, memoryChart()); err == nil {
		t.Error("Render with a negative width: want an error")
	}
}

func TestRenderEdgeCases(t *testing.T) {
	cases := map[string]Chart{
		"one point":         {Title: "one", Series: []Series{{Name: "a", Points: []Point{{3, 7}}}}},
		"one point at zero": {Title: "zero", Series: []Series{{Name: "a", Points: []Point{{0, 0}}}}},
		"all equal Y": {Title: "flat", Series: []Series{
			{Name: "a", Points: []Point{{1, 5}, {2, 5}, {3, 5}}},
			{Name: "b", Points: []Point{{1, 5}, {2, 5}, {3, 5}}},
		}},
		"negative values": {Title: "neg", Series: []Series{{Name: "a", Points: []Point{{-5, -2}, {0, 3}, {5, -0.5}}}}},
		"NaN and Inf mixed in": {Title: "nan", Series: []Series{
			{Name: "empty"},
			{Name: "b", Points: []Point{{1, 1}, {math.NaN(), 2}, {2, math.Inf(-1)}, {3, 4}}},
		}},
		"tiny values": {Title: "tiny", Series: []Series{{Name: "a", Points: []Point{{0, 0.001}, {1, 0.003}}}}},
		"huge values": {Title: "huge", Series: []Series{{Name: "a", Points: []Point{{0, 1e9}, {1, 3.5e9}}}}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			img := render(t, 0, 0, c)
			// Every drawn series shows its colour; series are coloured
			// by their position, also when an earlier one is skipped.
			for i, s := range c.Series {
				n := countColor(img, img.Bounds(), palette[i])
				if len(s.Points) == 0 {
					if n != 0 {
						t.Errorf("empty series %d drawn with %d pixels", i, n)
					}
					continue
				}
				if n == 0 {
					t.Errorf("series %d (%s) not drawn", i, s.Name)
				}
			}
		})
	}
}

func TestManySeriesCycleThePalette(t *testing.T) {
	var c Chart
	c.Title = "many"
	for i := range len(palette) + 2 {
		c.Series = append(c.Series, Series{Name: "s" + string(rune('a'+i)), Points: []Point{{0, float64(i)}, {1, float64(i + 1)}}})
	}
	img := render(t, 0, 0, c)
	for i := range palette {
		if countColor(img, img.Bounds(), palette[i]) == 0 {
			t.Errorf("palette colour %d not used", i)
		}
	}
}

func TestPaletteColoursAreDistinct(t *testing.T) {
	if len(palette) < 6 {
		t.Fatalf("palette has %d colours, want at least 6", len(palette))
	}
	reserved := []color.RGBA{white, textColor, titleColor, axisColor, gridColor, zeroColor, boxColor}
	for i, a := range palette {
		if slices.Contains(reserved, a) {
			t.Errorf("palette colour %d is also used for non-data drawing", i)
		}
		for _, b := range palette[i+1:] {
			if a == b {
				t.Errorf("palette colour %v appears twice", a)
			}
		}
	}
}

func TestPrepareSortsAndFilters(t *testing.T) {
	p, err := prepare(Chart{Series: []Series{
		{Name: "skipped"},
		{Name: "b", Points: []Point{{3, 1}, {1, 2}, {math.Inf(1), 3}, {2, math.NaN()}, {2, 4}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.series) != 1 {
		t.Fatalf("got %d series, want 1", len(p.series))
	}
	s := p.series[0]
	if s.index != 1 {
		t.Errorf("series index = %d, want 1 (its position in Chart.Series)", s.index)
	}
	want := []Point{{1, 2}, {2, 4}, {3, 1}}
	if !slices.Equal(s.points, want) {
		t.Errorf("points = %v, want %v", s.points, want)
	}
	// X starts at 0 because 1 <= 3/2; Y starts at 0.
	if p.xTicks[0] != 0 || p.yTicks[0] != 0 {
		t.Errorf("axes start at x=%v y=%v, want 0 and 0", p.xTicks[0], p.yTicks[0])
	}
}

func TestAxisRanges(t *testing.T) {
	tests := []struct {
		name          string
		pts           []Point
		xFirst, xLast float64
		yFirst, yLast float64
	}{
		{"from zero", []Point{{1, 120}, {50, 410}}, 0, 50, 0, 500},
		{"X far from zero", []Point{{900, 1}, {1000, 2}}, 900, 1000, 0, 2},
		{"negative Y", []Point{{0, -3}, {10, 7}}, 0, 10, -5, 7.5},
		{"single point", []Point{{3, 7}}, 0, 6, 0, 8},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := prepare(Chart{Series: []Series{{Points: tt.pts}}})
			if err != nil {
				t.Fatal(err)
			}
			xf, xl := p.xTicks[0], p.xTicks[len(p.xTicks)-1]
			yf, yl := p.yTicks[0], p.yTicks[len(p.yTicks)-1]
			if xf != tt.xFirst || xl != tt.xLast {
				t.Errorf("X axis %v..%v (ticks %v), want %v..%v", xf, xl, p.xTicks, tt.xFirst, tt.xLast)
			}
			if yf != tt.yFirst || yl != tt.yLast {
				t.Errorf("Y axis %v..%v (ticks %v), want %v..%v", yf, yl, p.yTicks, tt.yFirst, tt.yLast)
			}
		})
	}
}

func TestNiceTicks(t *testing.T) {
	tests := []struct {
		lo, hi float64
		want   []float64
	}{
		{0, 1000, []float64{0, 250, 500, 750, 1000}},
		{0, 0.3, []float64{0, 0.1, 0.2, 0.3}},
		{0, 1, []float64{0, 0.25, 0.5, 0.75, 1}},
		{0, 10, []float64{0, 2.5, 5, 7.5, 10}},
		{0, 410, []float64{0, 100, 200, 300, 400, 500}},
		{0, 24.3, []float64{0, 5, 10, 15, 20, 25}},
		{0, 10000, []float64{0, 2500, 5000, 7500, 10000}},
		{-3, 7, nil}, // only the general properties are checked
		{900, 1000, []float64{900, 925, 950, 975, 1000}},
		{0.001, 0.003, []float64{0.001, 0.0015, 0.002, 0.0025, 0.003}},
	}
	for _, tt := range tests {
		got := niceTicks(tt.lo, tt.hi)
		checkTicks(t, tt.lo, tt.hi, got)
		if len(tt.want) > 0 && !slices.Equal(got, tt.want) {
			t.Errorf("niceTicks(%v, %v) = %v, want %v", tt.lo, tt.hi, got, tt.want)
		}
	}

	// Degenerate input still gives a usable axis.
	for _, r := range [][2]float64{{0, 0}, {5, 5}, {-2, -2}, {math.NaN(), 1}} {
		got := niceTicks(r[0], r[1])
		if len(got) < 2 || !(got[len(got)-1] > got[0]) {
			t.Errorf("niceTicks(%v, %v) = %v, want at least two increasing ticks", r[0], r[1], got)
		}
	}

	// Random ranges at many scales.
	rng := rand.New(rand.NewSource(1))
	for range 5000 {
		scale := math.Pow(10, float64(rng.Intn(16)-8))
		a := (rng.Float64()*2 - 1) * scale * 10
		b := (rng.Float64()*2 - 1) * scale * 10
		if a == b {
			continue
		}
		lo, hi := min(a, b), max(a, b)
		checkTicks(t, lo, hi, niceTicks(lo, hi))
	}
}

// checkTicks asserts the properties every tick list must have: 4 to 6
// evenly spaced ticks covering lo..hi with a step of 1, 2, 2.5 or 5 x 10^k.
func checkTicks(t *testing.T, lo, hi float64, ticks []float64) {
	t.Helper()
	if n := len(ticks); n < 4 || n > 6 {
		t.Errorf("niceTicks(%v, %v) = %v: %d ticks, want 4-6", lo, hi, ticks, n)
		return
	}
	step := ticks[1] - ticks[0]
	tol := step * 1e-6
	if ticks[0] > lo+tol || ticks[len(ticks)-1] < hi-tol {
		t.Errorf("niceTicks(%v, %v) = %v does not cover the range", lo, hi, ticks)
	}
	for i := 2; i < len(ticks); i++ {
		if d := ticks[i] - ticks[i-1]; math.Abs(d-step) > tol {
			t.Errorf("niceTicks(%v, %v) = %v: uneven step", lo, hi, ticks)
			return
		}
	}
	m := step / math.Pow(10, math.Floor(math.Log10(step)))
	if !slices.ContainsFunc([]float64{1, 2, 2.5, 5, 10}, func(v float64) bool { return math.Abs(v-m) < 1e-6 }) {
		t.Errorf("niceTicks(%v, %v) = %v: step %v is not 1, 2, 2.5 or 5 x 10^k", lo, hi, ticks, step)
	}
}

func TestTickLabels(t *testing.T) {
	tests := []struct {
		ticks []float64
		want  []string
	}{
		{[]float64{0, 250, 500, 750, 1000}, []string{"0", "250", "500", "750", "1k"}},
		{[]float64{0, 2500, 5000, 7500, 10000}, []string{"0", "2.5k", "5k", "7.5k", "10k"}},
		{[]float64{0, 0.1, 0.2, 0.3}, []string{"0", "0.1", "0.2", "0.3"}},
		{[]float64{0, 0.25, 0.5, 0.75, 1}, []string{"0", "0.25", "0.5", "0.75", "1"}},
		{[]float64{-4, -2, 0, 2, 4}, []string{"-4", "-2", "0", "2", "4"}},
		{[]float64{0, 1e6, 2e6, 3e6}, []string{"0", "1M", "2M", "3M"}},
		{[]float64{1000, 1250, 1500, 1750, 2000}, []string{"1k", "1.25k", "1.5k", "1.75k", "2k"}},
		{[]float64{0, 1e9, 2e9, 3e9, 4e9}, []string{"0", "1G", "2G", "3G", "4G"}},
		{[]float64{0, 2.5e-8, 5e-8, 7.5e-8}, []string{"0", "2.5e-08", "5e-08", "7.5e-08"}},
		{niceTicks(0, 0.3), []string{"0", "0.1", "0.2", "0.3"}},
	}
	for _, tt := range tests {
		if got := tickLabels(tt.ticks); !slices.Equal(got, tt.want) {
			t.Errorf("tickLabels(%v) = %q, want %q", tt.ticks, got, tt.want)
		}
	}
}

// TestWriteSample writes a sample image for a person to look at, when
// PLOT_SAMPLE names the output file:
//
//	PLOT_SAMPLE=/tmp/plot-sample.png go test ./test/scale/plot/ -run TestWriteSample
func TestWriteSample(t *testing.T) {
	path := os.Getenv("PLOT_SAMPLE")
	if path == "" {
		t.Skip("set PLOT_SAMPLE=/path/to/file.png to write a sample image")
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := Render(f, 0, 0, memoryChart(), convergenceChart()); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}
