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
// CompiledPolicy that carries its own compile errors. Evaluating decides
// once: Match, PreEnqueue, Filter and Score return a Decision (pass, reject,
// hold or error) with the policy's failurePolicy already applied and its
// enforcement recorded, and callers only map decisions to their outputs.
// Errors are typed (*CompileError, *EvalError naming the policy, the rule
// and the field). Nothing here imports the scheduler framework.
package engine
