package celcost

import (
	"strings"
	"testing"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
)

// TestCallPrices: what the functions whose work grows with their input
// cost at runtime, from their arguments.
func TestCallPrices(t *testing.T) {
	t.Parallel()
	long := types.String(strings.Repeat("a", 160*1024))
	needle := types.String(strings.Repeat("a", 80*1024) + "b")
	list := func(n int) ref.Val {
		vals := make([]ref.Val, n)
		for i := range vals {
			vals[i] = types.Int(i)
		}
		return types.NewRefValList(types.DefaultTypeAdapter, vals)
	}
	tests := map[string]struct {
		function string
		args     []ref.Val
		want     uint64
	}{
		"charAt of 160 KiB":             {"charAt", []ref.Val{long, types.Int(1)}, 16384},
		"charAt of 10 bytes":            {"charAt", []ref.Val{types.String("0123456789"), types.Int(1)}, 1},
		"indexOf 80 KiB in 160 KiB":     {"indexOf", []ref.Val{long, needle}, 16384 * 8193},
		"indexOf a letter in 160 KiB":   {"indexOf", []ref.Val{long, types.String("b")}, 16384},
		"lastIndexOf 80 KiB in 160 KiB": {"lastIndexOf", []ref.Val{long, needle, types.Int(5)}, 16384 * 8193},
		"indexOf in a list":             {"indexOf", []ref.Val{list(20000), types.Int(5)}, 20001},
		"size of 160 KiB":               {"size", []ref.Val{long}, 16384},
		"size of a list":                {"size", []ref.Val{list(20000)}, 1},
		"substring of 160 KiB":          {"substring", []ref.Val{long, types.Int(1)}, 16384},
		"replace '' with 80 KiB":        {"replace", []ref.Val{types.String("abc"), types.String(""), needle}, 2 + 32769},
		"replace 'a' with 'bb'":         {"replace", []ref.Val{types.String("aaaa"), types.String("a"), types.String("bb")}, 2 + 1},
		"int of 160 KiB":                {"int", []ref.Val{long}, 16384},
		"int of a double":               {"int", []ref.Val{types.Double(1.5)}, 1},
		"format 160 KiB":                {"format", []ref.Val{types.String("%s"), types.NewStringList(types.DefaultTypeAdapter, []string{string(long)})}, 1 + 1 + 16384},
		"equal lists":                   {"_==_", []ref.Val{list(20000), list(20000)}, 20001},
		"equal lists of different size": {"_==_", []ref.Val{list(20000), list(3)}, 4},
		"lists.range(20000)":            {"lists.range", []ref.Val{types.Int(20000)}, 20011},
		"distinct of 2000":              {"distinct", []ref.Val{list(2000)}, 2000*2000*2 + 11},
		"in a list of 20000":            {"@in", []ref.Val{types.Int(1), list(20000)}, 20000},
		"flatten of 2 x 20000":          {"flatten", []ref.Val{types.NewRefValList(types.DefaultTypeAdapter, []ref.Val{list(20000), list(20000)})}, 40011},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if got := priceBefore(tc.function)(tc.args); got != tc.want {
				t.Errorf("%s costs %d, want %d", tc.function, got, tc.want)
			}
		})
	}
}
