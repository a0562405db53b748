package engine

import (
	"testing"
)

// TestSamplesCompile checks that every sample policy compiles without error
// or warning, against both the new- and the stored-expressions environment.
func TestSamplesCompile(t *testing.T) {
	t.Parallel()
	c := NewCompiler(testEnv(t))
	for name, policy := range loadSamples(t) {
		for _, stored := range []bool{false, true} {
			compiled := c.Compile(policy, CompileOptions{Stored: stored})
			if err := compiled.Err(); err != nil {
				t.Errorf("sample %s (stored=%v): %v", name, stored, err)
			}
			if len(compiled.Warnings) != 0 {
				t.Errorf("sample %s (stored=%v): warnings %v", name, stored, compiled.Warnings)
			}
		}
	}
}
