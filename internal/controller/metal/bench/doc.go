// Package bench benchmarks claim binding at fleet scale: a control plane, an emulated Redfish
// fleet (in a child process, so that only the controllers' CPU is measured) and the metal
// family's manager, started afresh for each fleet size. It holds only the benchmark; see
// claims_bench_test.go.
//
// Its code is all in test files: no build of metalhub includes it, and it exports nothing to
// import.
package bench
