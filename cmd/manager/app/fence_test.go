package app

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2/ktesting"
)

// TestFencedTransport: the scheduler's writes reach the API server only
// while the fence is open; reads always do.
func TestFencedTransport(t *testing.T) {
	const renewDeadline = time.Minute
	tests := map[string]struct {
		// renewed is how long ago the fence was last extended; 0 never.
		renewed time.Duration
		revoked bool
		method  string
		want    bool // reaches the server
	}{
		"never held, POST":            {method: http.MethodPost},
		"never held, GET":             {method: http.MethodGet, want: true},
		"renewed just now, POST":      {renewed: time.Millisecond, method: http.MethodPost, want: true},
		"renewed just now, PATCH":     {renewed: time.Millisecond, method: http.MethodPatch, want: true},
		"renewed just now, DELETE":    {renewed: time.Millisecond, method: http.MethodDelete, want: true},
		"renewal overdue, POST":       {renewed: renewDeadline + time.Second, method: http.MethodPost},
		"renewal overdue, PUT":        {renewed: renewDeadline + time.Second, method: http.MethodPut},
		"renewal overdue, DELETE":     {renewed: renewDeadline + time.Second, method: http.MethodDelete},
		"renewal overdue, GET":        {renewed: renewDeadline + time.Second, method: http.MethodGet, want: true},
		"renewed, then revoked, POST": {renewed: time.Millisecond, revoked: true, method: http.MethodPost},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var served atomic.Int32
			server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				served.Add(1)
			}))
			defer server.Close()
			fence := newLeaderFence(renewDeadline, ktesting.NewLogger(t, ktesting.DefaultConfig))
			if tc.renewed != 0 {
				fence.extend(time.Now().Add(-tc.renewed))
			}
			if tc.revoked {
				fence.revoke()
			}
			client := &http.Client{Transport: fence.wrap(http.DefaultTransport)}
			req, err := http.NewRequestWithContext(t.Context(), tc.method, server.URL+"/api/v1/namespaces/ns/pods/p/binding", strings.NewReader("{}"))
			if err != nil {
				t.Fatal(err)
			}
			resp, err := client.Do(req)
			if err == nil {
				resp.Body.Close()
			}
			if got := served.Load() == 1; got != tc.want {
				t.Errorf("the request reached the server: %v, want %v (error %v)", got, tc.want, err)
			}
			if tc.want {
				if err != nil {
					t.Errorf("error %v, want none", err)
				}
			} else if !errors.Is(err, ErrFenced) {
				t.Errorf("error %v, want ErrFenced", err)
			}
		})
	}
}

// TestFencedLock: client-go's Lease lock, wrapped, opens the fence on each
// write that makes or keeps this replica the holder, counted from before
// the write was sent, and closes it when the Lease is seen held by another
// or released.
func TestFencedLock(t *testing.T) {
	const renewDeadline = 200 * time.Millisecond
	const me, other = "me", "other"
	record := func(holder string) resourcelock.LeaderElectionRecord {
		now := metav1.Now()
		return resourcelock.LeaderElectionRecord{HolderIdentity: holder, LeaseDurationSeconds: 1, AcquireTime: now, RenewTime: now}
	}
	newLock := func(t *testing.T) (*fencedLock, *fake.Clientset) {
		client := fake.NewClientset()
		fence := newLeaderFence(renewDeadline, ktesting.NewLogger(t, ktesting.DefaultConfig))
		inner, err := resourcelock.New(resourcelock.LeasesResourceLock, "ns", "lease", client.CoreV1(), client.CoordinationV1(),
			resourcelock.ResourceLockConfig{Identity: me})
		if err != nil {
			t.Fatal(err)
		}
		return &fencedLock{Interface: inner, fence: fence}, client
	}
	open := func(l *fencedLock) bool { return l.fence.check() == nil }

	t.Run("acquire, renew, release", func(t *testing.T) {
		ctx := t.Context()
		l, _ := newLock(t)
		if open(l) {
			t.Fatal("the fence is open before the Lease was acquired")
		}
		if err := l.Create(ctx, record(me)); err != nil {
			t.Fatal(err)
		}
		if !open(l) {
			t.Fatal("the fence is closed after the Lease was acquired")
		}
		time.Sleep(renewDeadline + 50*time.Millisecond)
		if err := l.fence.check(); !errors.Is(err, ErrFenced) {
			t.Fatalf("past the renew deadline without a renewal: %v, want ErrFenced", err)
		}
		if _, _, err := l.Get(ctx); err != nil {
			t.Fatal(err)
		}
		if err := l.Update(ctx, record(me)); err != nil {
			t.Fatal(err)
		}
		if !open(l) {
			t.Fatal("the fence is closed after a renewal")
		}
		// controller-runtime releases the Lease when the manager stops.
		if err := l.Update(ctx, record("")); err != nil {
			t.Fatal(err)
		}
		if open(l) {
			t.Error("the fence is open after the Lease was released")
		}
	})

	t.Run("the Lease seen held by another", func(t *testing.T) {
		ctx := t.Context()
		l, client := newLock(t)
		if err := l.Create(ctx, record(me)); err != nil {
			t.Fatal(err)
		}
		lease, err := client.CoordinationV1().Leases("ns").Get(ctx, "lease", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		lease.Spec.HolderIdentity = new(other)
		if _, err := client.CoordinationV1().Leases("ns").Update(ctx, lease, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, _, err := l.Get(ctx); err != nil {
			t.Fatal(err)
		}
		if open(l) {
			t.Error("the fence is open after the Lease was seen held by another replica")
		}
	})

	t.Run("a failed renewal", func(t *testing.T) {
		ctx := t.Context()
		l, client := newLock(t)
		client.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, errors.New("injected")
		})
		if err := l.Create(ctx, record(me)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(renewDeadline + 50*time.Millisecond)
		if err := l.Update(ctx, record(me)); err == nil {
			t.Fatal("the injected update error was not returned")
		}
		if open(l) {
			t.Error("the fence is open after a failed renewal past the renew deadline")
		}
	})

	t.Run("a renewal that returns after the renew deadline", func(t *testing.T) {
		// The time that counts is when the renewal was sent: one stuck
		// (or frozen) longer than the renew deadline opens nothing.
		ctx := t.Context()
		l, client := newLock(t)
		if err := l.Create(ctx, record(me)); err != nil {
			t.Fatal(err)
		}
		client.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
			time.Sleep(renewDeadline + 50*time.Millisecond)
			return false, nil, nil
		})
		if _, _, err := l.Get(ctx); err != nil {
			t.Fatal(err)
		}
		if err := l.Update(ctx, record(me)); err != nil {
			t.Fatal(err)
		}
		if lease, err := client.CoordinationV1().Leases("ns").Get(ctx, "lease", metav1.GetOptions{}); err != nil || *lease.Spec.HolderIdentity != me {
			t.Fatalf("the Lease after the renewal: %v, %v", lease, err)
		}
		if open(l) {
			t.Error("the fence is open after a renewal that took longer than the renew deadline")
		}
	})
}
