// Makes the golden histogram chunks of tests/testdata/histogram with
// Prometheus' own encoders (tsdb/chunkenc): deterministic sequences of
// native histograms, each appended as Prometheus' head appends them
// (AppendHistogram / AppendFloatHistogram, not append-only, a chunk cut
// after 40 samples so that a new chunk's header is decided against the
// previous one), and the chunks' bytes and decoded samples written as
// JSON. Not part of the Rust build: scripts/make-histogram-golden runs it
// beside a Prometheus source tree.
package histgolden

import (
	"encoding/hex"
	"encoding/json"
	"math"
	"math/rand"
	"os"
	"strconv"
	"testing"

	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
)

const cutAfter = 40

type jsonH struct {
	T      int64      `json:"t"`
	Hint   int        `json:"hint"`
	Schema int32      `json:"schema"`
	ZT     string     `json:"zero_threshold_bits"`
	ZC     string     `json:"zero_count"`
	Count  string     `json:"count"`
	Sum    string     `json:"sum_bits"`
	PS     [][2]int64 `json:"positive_spans"`
	NS     [][2]int64 `json:"negative_spans"`
	PB     []string   `json:"positive_buckets"`
	NB     []string   `json:"negative_buckets"`
	CV     []string   `json:"custom_value_bits"`
}

type jsonChunk struct {
	Hex     string  `json:"hex"`
	Samples []jsonH `json:"samples"`
}

type jsonCase struct {
	Name        string      `json:"name"`
	Samples     []jsonH     `json:"samples"`
	Chunks      []jsonChunk `json:"chunks"`
	FloatChunks []jsonChunk `json:"float_chunks"`
}

func bits(f float64) string { return strconv.FormatUint(math.Float64bits(f), 10) }

func spans(s []histogram.Span) [][2]int64 {
	out := [][2]int64{}
	for _, x := range s {
		out = append(out, [2]int64{int64(x.Offset), int64(x.Length)})
	}
	return out
}

func fromInt(t int64, h *histogram.Histogram) jsonH {
	j := jsonH{T: t, Hint: int(h.CounterResetHint), Schema: h.Schema, ZT: bits(h.ZeroThreshold),
		ZC: strconv.FormatUint(h.ZeroCount, 10), Count: strconv.FormatUint(h.Count, 10), Sum: bits(h.Sum),
		PS: spans(h.PositiveSpans), NS: spans(h.NegativeSpans), PB: []string{}, NB: []string{}, CV: []string{}}
	for _, b := range h.PositiveBuckets {
		j.PB = append(j.PB, strconv.FormatInt(b, 10))
	}
	for _, b := range h.NegativeBuckets {
		j.NB = append(j.NB, strconv.FormatInt(b, 10))
	}
	for _, c := range h.CustomValues {
		j.CV = append(j.CV, bits(c))
	}
	return j
}

// Float histograms in the same shape: counts and buckets as float bits.
func fromFloat(t int64, h *histogram.FloatHistogram) jsonH {
	j := jsonH{T: t, Hint: int(h.CounterResetHint), Schema: h.Schema, ZT: bits(h.ZeroThreshold),
		ZC: bits(h.ZeroCount), Count: bits(h.Count), Sum: bits(h.Sum),
		PS: spans(h.PositiveSpans), NS: spans(h.NegativeSpans), PB: []string{}, NB: []string{}, CV: []string{}}
	for _, b := range h.PositiveBuckets {
		j.PB = append(j.PB, bits(b))
	}
	for _, b := range h.NegativeBuckets {
		j.NB = append(j.NB, bits(b))
	}
	for _, c := range h.CustomValues {
		j.CV = append(j.CV, bits(c))
	}
	return j
}

type sample struct {
	t int64
	h *histogram.Histogram
}

// A histogram from absolute bucket counts.
func mk(hint histogram.CounterResetHint, schema int32, zt float64, zc uint64, sum float64,
	ps []histogram.Span, pabs []int64, ns []histogram.Span, nabs []int64, cv []float64) *histogram.Histogram {
	h := &histogram.Histogram{CounterResetHint: hint, Schema: schema, ZeroThreshold: zt, ZeroCount: zc, Sum: sum,
		PositiveSpans: ps, NegativeSpans: ns, CustomValues: cv}
	count := zc
	var prev int64
	for _, c := range pabs {
		h.PositiveBuckets = append(h.PositiveBuckets, c-prev)
		prev = c
		count += uint64(c)
	}
	prev = 0
	for _, c := range nabs {
		h.NegativeBuckets = append(h.NegativeBuckets, c-prev)
		prev = c
		count += uint64(c)
	}
	h.Count = count
	return h
}

// Spans over a sorted set of bucket indexes.
func spansOf(idx []int) []histogram.Span {
	var out []histogram.Span
	last := 0
	for i, x := range idx {
		if i > 0 && x == last+1 {
			out[len(out)-1].Length++
		} else {
			off := x - last - 1
			if i == 0 {
				off = x
			}
			out = append(out, histogram.Span{Offset: int32(off), Length: 1})
		}
		last = x
	}
	return out
}

func cases() map[string][]sample {
	r := rand.New(rand.NewSource(20261204))
	out := map[string][]sample{}
	zt := math.Ldexp(0.5, -127) // Prometheus' default 2^-128

	// A fixed layout, counts growing: the common case.
	{
		var ss []sample
		pidx := []int{-2, -1, 0, 1, 5, 6, 7}
		nidx := []int{0, 1}
		p := make([]int64, len(pidx))
		n := make([]int64, len(nidx))
		var zc uint64
		sum := 0.0
		t := int64(1_700_000_000_000)
		for i := 0; i < 100; i++ {
			for j := range p {
				p[j] += int64(r.Intn(6))
			}
			for j := range n {
				n[j] += int64(r.Intn(3))
			}
			zc += uint64(r.Intn(2))
			sum += r.Float64() * 10
			t += 15000 + int64(r.Intn(101)-50)
			ss = append(ss, sample{t, mk(0, 3, zt, zc, sum, spansOf(pidx), append([]int64{}, p...), spansOf(nidx), append([]int64{}, n...), nil)})
		}
		out["steady"] = ss
	}
	// Buckets appear over time: forward inserts and recoding.
	{
		var ss []sample
		counts := map[int]int64{0: 1, 1: 1, 2: 1}
		sum := 0.0
		t := int64(1_700_000_000_000)
		for i := 0; i < 90; i++ {
			if i%9 == 4 {
				counts[r.Intn(30)-10] += 0
			}
			for _, k := range sortedKeys(counts) {
				counts[k] += int64(r.Intn(4))
			}
			idx := sortedKeys(counts)
			abs := make([]int64, len(idx))
			for j, k := range idx {
				abs[j] = counts[k]
			}
			sum += r.Float64()
			t += 10000
			ss = append(ss, sample{t, mk(0, 1, zt, 0, sum, spansOf(idx), abs, nil, nil, nil)})
		}
		out["new_buckets"] = ss
	}
	// Empty buckets come and go (backward inserts), sometimes with a new
	// bucket at the same time (both ways).
	{
		var ss []sample
		t := int64(-5_000_000)
		base := []int{-3, -2, 0, 2, 3, 4, 8}
		counts := map[int]int64{}
		for _, k := range base {
			counts[k] = 0
		}
		sum := 0.0
		for i := 0; i < 80; i++ {
			for _, k := range []int{-3, 2, 8} {
				counts[k] += int64(r.Intn(3) + 1)
			}
			if i == 30 {
				counts[12] = 0
			}
			if i > 30 {
				counts[12] += 1
			}
			var idx []int
			for _, k := range sortedKeys(counts) {
				if counts[k] == 0 && r.Intn(2) == 0 {
					continue // an empty bucket left out this time
				}
				idx = append(idx, k)
			}
			abs := make([]int64, len(idx))
			for j, k := range idx {
				abs[j] = counts[k]
			}
			sum += 1.5
			t += 30000
			ss = append(ss, sample{t, mk(0, 0, 0, 0, sum, nil, nil, spansOf(idx), abs, nil)})
		}
		out["vanishing_empty"] = ss
	}
	// Counter resets: counts drop, and one explicit reset hint.
	{
		var ss []sample
		pidx := []int{0, 1, 2, 3}
		p := make([]int64, 4)
		sum := 0.0
		t := int64(1_600_000_000_000)
		for i := 0; i < 90; i++ {
			if i%25 == 24 {
				for j := range p {
					p[j] /= 3
				}
				sum /= 3
			}
			for j := range p {
				p[j] += int64(r.Intn(10))
			}
			sum += 3.25
			t += 60000
			hint := histogram.UnknownCounterReset
			if i == 60 {
				hint = histogram.CounterReset
			}
			if i == 70 {
				hint = histogram.NotCounterReset
			}
			ss = append(ss, sample{t, mk(hint, 2, zt, uint64(i), sum, spansOf(pidx), append([]int64{}, p...), nil, nil, nil)})
		}
		out["resets"] = ss
	}
	// Schema and zero threshold changes start new chunks.
	{
		var ss []sample
		t := int64(1_700_000_000_000)
		var c int64
		for i := 0; i < 60; i++ {
			schema := int32(3)
			if i >= 20 {
				schema = 2
			}
			z := zt
			if i >= 40 {
				z = 0.001
			}
			c += int64(r.Intn(50))
			t += 5000
			ss = append(ss, sample{t, mk(0, schema, z, uint64(i), float64(c)*0.5, spansOf([]int{-1, 0, 1}), []int64{c, c + 1, c + 2}, nil, nil, nil)})
		}
		out["schema_changes"] = ss
	}
	// Gauge histograms: values up and down, layouts merged both ways.
	{
		var ss []sample
		t := int64(1_700_000_000_000)
		for i := 0; i < 70; i++ {
			var idx []int
			for k := -5; k < 10; k++ {
				if r.Intn(3) > 0 {
					idx = append(idx, k)
				}
			}
			abs := make([]int64, len(idx))
			for j := range abs {
				abs[j] = int64(r.Intn(100))
			}
			t += 15000
			ss = append(ss, sample{t, mk(histogram.GaugeType, 0, zt, uint64(r.Intn(5)), r.Float64()*100-50, spansOf(idx), abs, spansOf([]int{0}), []int64{int64(r.Intn(7))}, nil)})
		}
		out["gauge"] = ss
	}
	// Custom bucket bounds (NHCB), some not whole thousandths.
	{
		var ss []sample
		cv := []float64{0.005, 0.01, 0.025, 0.1, 0.25, 1, 2.5, 10, 33554.43, 40000, 1e-4 + 1e5}
		p := make([]int64, len(cv)+1)
		t := int64(1_700_000_000_000)
		sum := 0.0
		for i := 0; i < 50; i++ {
			for j := range p {
				p[j] += int64(r.Intn(4))
			}
			sum += r.Float64()
			t += 15000
			ss = append(ss, sample{t, mk(0, histogram.CustomBucketsSchema, 0, 0, sum, spansOf(seq(len(p))), append([]int64{}, p...), nil, nil, cv)})
		}
		// Other bounds: a reset.
		for i := 0; i < 10; i++ {
			t += 15000
			ss = append(ss, sample{t, mk(0, histogram.CustomBucketsSchema, 0, 0, float64(i), spansOf([]int{0, 1}), []int64{int64(i), int64(2 * i)}, nil, nil, []float64{1, 2})})
		}
		out["custom_buckets"] = ss
	}
	// A stale marker in the middle, then the series goes on.
	{
		var ss []sample
		t := int64(1_700_000_000_000)
		var c int64
		for i := 0; i < 60; i++ {
			t += 15000
			if i == 25 {
				ss = append(ss, sample{t, &histogram.Histogram{Sum: math.Float64frombits(value.StaleNaN)}})
				continue
			}
			c += 3
			ss = append(ss, sample{t, mk(0, 4, zt, 1, float64(c), spansOf([]int{1, 2}), []int64{c, c * 2}, nil, nil, nil)})
		}
		out["stale"] = ss
	}
	// Large values and irregular timestamps: the wide varbit codes.
	{
		var ss []sample
		t := int64(-1 << 40)
		var c int64 = 1 << 40
		for i := 0; i < 50; i++ {
			t += int64(r.Intn(1<<30)) * int64(1+r.Intn(3))
			c += int64(r.Intn(1 << 35))
			sum := float64(c) * math.Pi
			if i == 10 {
				sum = math.Inf(1)
			}
			if i == 11 {
				sum = math.NaN()
			}
			ss = append(ss, sample{t, mk(0, -4, 1.5, uint64(c), sum, spansOf([]int{-100, 50}), []int64{c, c + int64(r.Intn(1<<20))}, nil, nil, nil)})
		}
		out["big_values"] = ss
	}
	return out
}

func seq(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

func sortedKeys(m map[int]int64) []int {
	var k []int
	for x := range m {
		k = append(k, x)
	}
	for i := 1; i < len(k); i++ {
		for j := i; j > 0 && k[j] < k[j-1]; j-- {
			k[j], k[j-1] = k[j-1], k[j]
		}
	}
	return k
}

// appendInt appends ss as the head does; the chunks.
func appendInt(tb testing.TB, ss []sample) []*chunkenc.HistogramChunk {
	var chunks []*chunkenc.HistogramChunk
	var cur *chunkenc.HistogramChunk
	var app, prev *chunkenc.HistogramAppender
	for _, s := range ss {
		if cur == nil || app.NumSamples() >= cutAfter {
			if cur != nil {
				chunks = append(chunks, cur)
				prev = app
			}
			cur = chunkenc.NewHistogramChunk()
			a, err := cur.Appender()
			if err != nil {
				tb.Fatal(err)
			}
			app = a.(*chunkenc.HistogramAppender)
		}
		c, recoded, a, err := app.AppendHistogram(prev, s.t, s.h.Copy(), false)
		if err != nil {
			tb.Fatal(err)
		}
		if c != nil {
			if !recoded {
				chunks = append(chunks, cur)
				prev = app
			}
			cur = c.(*chunkenc.HistogramChunk)
			app = a.(*chunkenc.HistogramAppender)
		}
	}
	return append(chunks, cur)
}

func intChunks(t *testing.T, ss []sample) []jsonChunk {
	chunks := appendInt(t, ss)
	var out []jsonChunk
	for _, c := range chunks {
		jc := jsonChunk{Hex: hex.EncodeToString(c.Bytes()), Samples: []jsonH{}}
		it := c.Iterator(nil)
		for it.Next() == chunkenc.ValHistogram {
			ts, h := it.AtHistogram(nil)
			jc.Samples = append(jc.Samples, fromInt(ts, h))
		}
		if it.Err() != nil {
			t.Fatal(it.Err())
		}
		out = append(out, jc)
	}
	return out
}

// appendFloat appends ss (as float histograms) as the head does.
func appendFloat(tb testing.TB, ss []sample) []*chunkenc.FloatHistogramChunk {
	var chunks []*chunkenc.FloatHistogramChunk
	var cur *chunkenc.FloatHistogramChunk
	var app, prev *chunkenc.FloatHistogramAppender
	for _, s := range ss {
		if cur == nil || app.NumSamples() >= cutAfter {
			if cur != nil {
				chunks = append(chunks, cur)
				prev = app
			}
			cur = chunkenc.NewFloatHistogramChunk()
			a, err := cur.Appender()
			if err != nil {
				tb.Fatal(err)
			}
			app = a.(*chunkenc.FloatHistogramAppender)
		}
		c, recoded, a, err := app.AppendFloatHistogram(prev, s.t, s.h.ToFloat(nil), false)
		if err != nil {
			tb.Fatal(err)
		}
		if c != nil {
			if !recoded {
				chunks = append(chunks, cur)
				prev = app
			}
			cur = c.(*chunkenc.FloatHistogramChunk)
			app = a.(*chunkenc.FloatHistogramAppender)
		}
	}
	return append(chunks, cur)
}

func floatChunks(t *testing.T, ss []sample) []jsonChunk {
	chunks := appendFloat(t, ss)
	var out []jsonChunk
	for _, c := range chunks {
		jc := jsonChunk{Hex: hex.EncodeToString(c.Bytes()), Samples: []jsonH{}}
		it := c.Iterator(nil)
		for it.Next() == chunkenc.ValFloatHistogram {
			ts, h := it.AtFloatHistogram(nil)
			jc.Samples = append(jc.Samples, fromFloat(ts, h))
		}
		if it.Err() != nil {
			t.Fatal(it.Err())
		}
		out = append(out, jc)
	}
	return out
}

func TestGolden(t *testing.T) {
	dir := os.Getenv("HISTOGRAM_TESTDATA")
	if dir == "" {
		t.Fatal("set HISTOGRAM_TESTDATA to tests/testdata/histogram")
	}
	all := cases()
	names := []string{"steady", "new_buckets", "vanishing_empty", "resets", "schema_changes", "gauge", "custom_buckets", "stale", "big_values"}
	var out []jsonCase
	for _, name := range names {
		ss := all[name]
		c := jsonCase{Name: name}
		for _, s := range ss {
			c.Samples = append(c.Samples, fromInt(s.t, s.h))
		}
		c.Chunks = intChunks(t, ss)
		c.FloatChunks = floatChunks(t, ss)
		out = append(out, c)
		t.Logf("%s: %d samples, %d chunks, %d float chunks", name, len(ss), len(c.Chunks), len(c.FloatChunks))
	}
	b, err := json.Marshal(map[string]interface{}{"cases": out})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir+"/golden.json", append(b, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
}

// The golden cases, in the order golden.json lists them.
func orderedCases() [][]sample {
	all := cases()
	var out [][]sample
	for _, n := range []string{"steady", "new_buckets", "vanishing_empty", "resets", "schema_changes", "gauge", "custom_buckets", "stale", "big_values"} {
		out = append(out, all[n])
	}
	return out
}

// One op is one pass over all nine cases (660 histograms), as
// benches/histogram_chunk.rs does. The input is copied before the timer
// starts: the Go appender may change a histogram's spans.
func BenchmarkAppendInt(b *testing.B) {
	cs := orderedCases()
	for i := 0; i < b.N; i++ {
		for _, c := range cs {
			appendInt(b, c)
		}
	}
}

func BenchmarkAppendFloat(b *testing.B) {
	cs := orderedCases()
	for i := 0; i < b.N; i++ {
		for _, c := range cs {
			appendFloat(b, c)
		}
	}
}

func BenchmarkIterateInt(b *testing.B) {
	var chunks []*chunkenc.HistogramChunk
	for _, c := range orderedCases() {
		chunks = append(chunks, appendInt(b, c)...)
	}
	var h histogram.Histogram
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var n uint64
		var it chunkenc.Iterator
		for _, c := range chunks {
			it = c.Iterator(it)
			for it.Next() == chunkenc.ValHistogram {
				_, hp := it.AtHistogram(&h)
				n += hp.Count
			}
		}
		_ = n
	}
}

func BenchmarkIterateFloat(b *testing.B) {
	var chunks []*chunkenc.FloatHistogramChunk
	for _, c := range orderedCases() {
		chunks = append(chunks, appendFloat(b, c)...)
	}
	var h histogram.FloatHistogram
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var n float64
		var it chunkenc.Iterator
		for _, c := range chunks {
			it = c.Iterator(it)
			for it.Next() == chunkenc.ValFloatHistogram {
				_, hp := it.AtFloatHistogram(&h)
				n += hp.Count
			}
		}
		_ = n
	}
}
