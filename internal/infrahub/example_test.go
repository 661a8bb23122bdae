package infrahub_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	emu "github.com/metalhub/metalhub/internal/emulator/infrahub"
	"github.com/metalhub/metalhub/internal/infrahub"
)

// A reconcile pass: validate the target date, list the artifacts, download
// only those whose checksum changed.
func Example() {
	e := emu.New(emu.Options{})
	_ = e.LoadSample()
	srv := httptest.NewServer(e)
	defer srv.Close()

	var clients infrahub.Cache // kept by the controller across reconciles
	c, err := clients.Get(infrahub.Config{URL: srv.URL, Username: "admin", Password: "infrahub", Timeout: 10 * time.Second})
	if err != nil {
		fmt.Println(infrahub.Reason(err), err)
		return
	}
	target := infrahub.Target{Branch: "main", At: "2025-04-09T00:00:00Z"}
	if err := infrahub.ValidateTargetDate(target.At); err != nil {
		fmt.Println(infrahub.Reason(err), err)
		return
	}
	arts, err := c.QueryArtifacts(context.Background(), infrahub.DefaultQueryName, "Webserver_Manifest", target)
	if err != nil {
		fmt.Println(infrahub.Reason(err), err)
		return
	}
	known := map[string]string{} // id -> checksum from status.checksums
	for _, a := range arts {
		if known[a.ID] == a.Checksum {
			continue
		}
		content, err := c.DownloadArtifact(context.Background(), a.ID, target)
		if err != nil {
			fmt.Println(infrahub.Reason(err), err)
			return
		}
		fmt.Println(a.Name, content.ContentType, len(content.Data) > 0)
	}
	_, err = c.QueryArtifacts(context.Background(), "", "x", infrahub.Target{At: "now-2d"})
	fmt.Println(infrahub.Reason(err))
	// Output:
	// Webserver_Manifest application/yaml true
	// InvalidTargetDate
}

// BenchmarkQueryAndDownload measures one cached-token pass over the sample.
func BenchmarkQueryAndDownload(b *testing.B) {
	e := emu.New(emu.Options{})
	_ = e.LoadSample()
	srv := httptest.NewServer(e)
	defer srv.Close()
	c, err := infrahub.New(infrahub.Config{URL: srv.URL, Username: "admin", Password: "infrahub"})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for b.Loop() {
		arts, err := c.QueryArtifacts(ctx, "", emu.SampleArtifactName, infrahub.Target{})
		if err != nil {
			b.Fatal(err)
		}
		for _, a := range arts {
			if _, err := c.DownloadArtifact(ctx, a.ID, infrahub.Target{}); err != nil {
				b.Fatal(err)
			}
		}
	}
	if n := e.Counters().Logins; n != 1 {
		b.Errorf("%d logins", n)
	}
}
