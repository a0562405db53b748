// Package engine compiles SchedulingPolicy objects into CEL programs and
// evaluates them for pods and nodes: the one implementation of celsched's
// semantics, shared by the scheduler plugins, the controller and the dry-run
// CLI so that they all give the same answers.
//
// The language is Kubernetes' CEL (k8s.io/apiserver/pkg/cel/environment and
// its libraries, as in ValidatingAdmissionPolicy, plus cel.bind). Pods, nodes
// and namespaces are typed from the Kubernetes OpenAPI schemas, so a misspelt
// field is a compile error.
//
// Compiling and evaluating are separate steps: Compile returns a
// CompiledPolicy that carries its own compile errors. Its Program (one per
// policy generation) is immutable and owns the results its expressions
// remember; the CompiledPolicy around it is how that generation acts
// (enforcement from spec, status and the pod's namespace; params), and is
// re-resolved without compiling when status or params change. Evaluating decides
// once: Match, PreEnqueue, Filter and Score return a Decision (pass, reject,
// hold or error) with the policy's failurePolicy already applied and its
// enforcement recorded, and callers only map decisions to their outputs.
// Errors are typed (*CompileError, *EvalError naming the policy, the rule
// and the field). Nothing here imports the scheduler framework.
//
// # Layers
//
// From the bottom up. The first two are packages of their own, which know
// nothing of policies; the rest share this package, because a
// CompiledPolicy's methods span compilation, evaluation and the memo:
//
//   - engine/celcost: limits and budgets, the compile-time cost estimator,
//     runtime cost tracking, and the Bounded and Tracked programs.
//   - engine/nodecache: the per-node-version cache the scheduler's node
//     objects are found in.
//   - The CEL environment (env.go, paramtypes.go): the variables and
//     their types from the OpenAPI schemas, params types from CRDs.
//   - Inputs (convert.go, normalize.go): pods, nodes, namespaces and
//     params converted to CEL values once per version.
//   - Compilation (compile.go, signature.go, issues.go, enforcement.go,
//     params.go): Program and CompiledPolicy, what each expression reads
//     of the pod (its memo key), compile errors and warnings, the
//     enforcement rules and their resolution, params binding.
//   - Evaluation (evaluate.go, decision.go, account.go, explain.go,
//     why.go): Match, PreEnqueue, Filter and Score into a Decision, the
//     cost charged per policy evaluation, the rule-by-rule detail of the
//     dry run.
//   - Remembered results (memo.go, list.go): per node version and pod key,
//     per expression and per list of policies.
//   - registry.go: the compiled policies (Registry, one writer) and the
//     immutable Snapshots the scheduling cycles read.
//
// Packages engine/audit (the evidence audited decisions leave for status
// and reports) and engine/metrics (the Prometheus metrics) sit beside it.
package engine
