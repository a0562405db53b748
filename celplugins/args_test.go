package celplugins

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
)

func TestDecodeArgs(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		args    runtime.Object
		want    time.Duration
		wantErr bool
	}{
		"none":     {args: nil, want: DefaultEvaluationBudget},
		"empty":    {args: &runtime.Unknown{}, want: DefaultEvaluationBudget},
		"set":      {args: &runtime.Unknown{Raw: []byte(`{"evaluationBudget":"250ms"}`)}, want: 250 * time.Millisecond},
		"zero":     {args: &runtime.Unknown{Raw: []byte(`{"evaluationBudget":"0s"}`)}, want: DefaultEvaluationBudget},
		"negative": {args: &runtime.Unknown{Raw: []byte(`{"evaluationBudget":"-1s"}`)}, wantErr: true},
		"garbage":  {args: &runtime.Unknown{Raw: []byte(`{"evaluationBudget":"soon"}`)}, wantErr: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got, err := DecodeArgs(tc.args)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err %v, want error %v", err, tc.wantErr)
			}
			if err == nil && got.EvaluationBudget.Duration != tc.want {
				t.Errorf("budget %s, want %s", got.EvaluationBudget.Duration, tc.want)
			}
		})
	}
}
