package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

func TestSteps(t *testing.T) {
	boom := errors.New("boom")
	step := func(name string, res Result, err error) Step[*[]string] {
		return func(_ context.Context, ran *[]string) (Result, error) {
			*ran = append(*ran, name)
			return res, err
		}
	}
	cases := []struct {
		name    string
		steps   []Step[*[]string]
		wantRan string
		want    Result
		wantErr error
	}{
		{"all continue: done", []Step[*[]string]{step("a", Continue(), nil), step("b", Continue(), nil)}, "[a b]", Done(), nil},
		{"a write ends the pass", []Step[*[]string]{step("a", Continue(), nil), step("b", Wrote("w"), nil), step("c", Continue(), nil)}, "[a b]", Wrote("w"), nil},
		{"a requeue ends the pass", []Step[*[]string]{step("a", RequeueAfter(time.Second, "wait"), nil), step("b", Continue(), nil)}, "[a]", RequeueAfter(time.Second, "wait"), nil},
		{"done ends the pass", []Step[*[]string]{step("a", Done(), nil), step("b", Wrote("w"), nil)}, "[a]", Done(), nil},
		{"an error ends the pass", []Step[*[]string]{step("a", Continue(), boom), step("b", Wrote("w"), nil)}, "[a]", Continue(), boom},
		{"no steps: done", nil, "[]", Done(), nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var ran []string
			got, err := Steps(context.Background(), &ran, tc.steps...)
			if fmt.Sprint(ran) != tc.wantRan || got != tc.want || !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
				t.Errorf("ran %v, result %+v, err %v; want %s, %+v, %v", ran, got, err, tc.wantRan, tc.want, tc.wantErr)
			}
		})
	}
	if r := Continue().ctrlResult(time.Minute); r.RequeueAfter < time.Minute {
		t.Errorf("a handler that continues is done: %+v", r)
	}
}

func TestReasonOf(t *testing.T) {
	base := errors.New("secret x not found")
	cases := []struct {
		name, want string
		err        error
		ok         bool
	}{
		{"tagged", "SecretNotFound", Reasonf("SecretNotFound", "secret %s not found", "x"), true},
		{"wrapped", "SecretNotFound", fmt.Errorf("connect: %w", WithReason("SecretNotFound", base)), true},
		{"untagged", "", base, false},
		{"nil", "", WithReason("SecretNotFound", nil), false},
	}
	for _, tc := range cases {
		got, ok := ReasonOf(tc.err)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: ReasonOf = %q, %v; want %q, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
	if err := WithReason("X", base); !errors.Is(err, base) || err.Error() != base.Error() {
		t.Errorf("WithReason hides its cause: %v", err)
	}
}
