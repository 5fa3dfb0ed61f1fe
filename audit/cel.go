package audit

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/ext"
	"github.com/google/cel-go/interpreter"
	"k8s.io/apimachinery/pkg/runtime"
)

// The CEL environment of webhook matchConditions, modelled on
// k8s.io/apiserver/pkg/admission/plugin/cel/compile.go (createEnvForOpts with
// HasParams=false, HasAuthorizer=true, as webhook/accessors.go compiles them)
// and k8s.io/apiserver/pkg/cel/environment/base.go (the base options of 1.34).
//
// Differences, on purpose:
//   - `request` has Kubernetes' object type (celtypes.go) and, as in
//     Kubernetes, is bound at run time to the unstructured map of an
//     admissionv1.AdmissionRequest, so a missing optional field
//     (request.namespace of a cluster-scoped object) is the same "no such
//     key" error. `namespaceObject` is declared dyn (it is null for webhooks).
//   - The Kubernetes-only libraries (url, regex find, lists isSorted/sum/...,
//     quantity, ip, cidr, format, semver) are not bound; an expression using
//     them does not compile here and is reported unknown, never safe.
//   - `authorizer` and `authorizer.requestResource` are declared with the
//     Kubernetes authz functions but always bound to unknown values (partial
//     evaluation): the audit has no authorizer, so a result that depends on
//     one is unknown.
//
// Cost limits are kube-apiserver's (k8s.io/apiserver/pkg/apis/cel/config.go,
// the same in 1.32 to 1.37): an evaluation that goes over one is stopped
// there with an error, and the audit says unknown with the reason.
const (
	// perCallLimit is PerCallLimit: one expression's evaluation.
	perCallLimit = 1000000
	// matchConditionsBudget is RuntimeCELCostBudgetMatchConditions: all the
	// matchConditions of one webhook (or policy) for one request.
	matchConditionsBudget = 2500000
	// policyBudget is RuntimeCELCostBudget: all the expressions of one
	// policy binding for one request.
	policyBudget = 10000000
	// checkFrequency is CheckFrequency: comprehension iterations between
	// two looks at whether the evaluation was interrupted.
	checkFrequency = 100
)

const (
	varObject                    = "object"
	varOldObject                 = "oldObject"
	varRequest                   = "request"
	varNamespaceObject           = "namespaceObject"
	varAuthorizer                = "authorizer"
	varRequestResourceAuthorizer = "authorizer.requestResource"
)

// matchConditionEnv is the environment of webhooks' matchConditions, built once.
var matchConditionEnv = sync.OnceValues(func() (*cel.Env, error) {
	return requestEnv(baseEnvOptions(), false)
})

// requestEnv is an environment of opts that knows the request's type
// (and, with objects, the object types policies build).
func requestEnv(opts []cel.EnvOption, objects bool) (*cel.Env, error) {
	base, err := cel.NewEnv(opts...)
	if err != nil {
		return nil, err
	}
	return withRequestType(base, objects)
}

// baseEnvOptions are the options webhooks and policies share.
func baseEnvOptions() []cel.EnvOption {
	authorizerT := cel.ObjectType("kubernetes.authorization.Authorizer")
	pathCheckT := cel.ObjectType("kubernetes.authorization.PathCheck")
	groupCheckT := cel.ObjectType("kubernetes.authorization.GroupCheck")
	resourceCheckT := cel.ObjectType("kubernetes.authorization.ResourceCheck")
	decisionT := cel.ObjectType("kubernetes.authorization.Decision")
	// Never called: the receivers are always unknown. Kept so that a
	// program can be planned.
	unbound := func(args ...ref.Val) ref.Val {
		return types.NewErr("the audit does not model the authorizer")
	}
	member := func(name, id string, args []*cel.Type, result *cel.Type) cel.EnvOption {
		return cel.Function(name, cel.MemberOverload(id, args, result, cel.FunctionBinding(unbound)))
	}
	return []cel.EnvOption{
		cel.HomogeneousAggregateLiterals(),
		cel.DefaultUTCTimeZone(true),
		cel.CrossTypeNumericComparisons(true),
		cel.OptionalTypes(),
		ext.Strings(ext.StringsVersion(2)),
		ext.Sets(),
		ext.TwoVarComprehensions(),
		ext.Lists(ext.ListsVersion(3)),
		cel.Types(authorizerT, pathCheckT, groupCheckT, resourceCheckT, decisionT),
		cel.Variable(varObject, cel.DynType),
		cel.Variable(varOldObject, cel.DynType),
		cel.Variable(varNamespaceObject, cel.DynType),
		cel.Variable(varAuthorizer, authorizerT),
		cel.Variable(varRequestResourceAuthorizer, resourceCheckT),
		member("path", "authorizer_path", []*cel.Type{authorizerT, cel.StringType}, pathCheckT),
		member("group", "authorizer_group", []*cel.Type{authorizerT, cel.StringType}, groupCheckT),
		cel.Function("serviceAccount", cel.MemberOverload("authorizer_serviceaccount",
			[]*cel.Type{authorizerT, cel.StringType, cel.StringType}, authorizerT, cel.FunctionBinding(unbound))),
		member("resource", "groupcheck_resource", []*cel.Type{groupCheckT, cel.StringType}, resourceCheckT),
		member("subresource", "resourcecheck_subresource", []*cel.Type{resourceCheckT, cel.StringType}, resourceCheckT),
		member("namespace", "resourcecheck_namespace", []*cel.Type{resourceCheckT, cel.StringType}, resourceCheckT),
		member("name", "resourcecheck_name", []*cel.Type{resourceCheckT, cel.StringType}, resourceCheckT),
		member("fieldSelector", "authorizer_fieldselector", []*cel.Type{resourceCheckT, cel.StringType}, resourceCheckT),
		member("labelSelector", "authorizer_labelselector", []*cel.Type{resourceCheckT, cel.StringType}, resourceCheckT),
		cel.Function("check",
			cel.MemberOverload("pathcheck_check", []*cel.Type{pathCheckT, cel.StringType}, decisionT, cel.FunctionBinding(unbound)),
			cel.MemberOverload("resourcecheck_check", []*cel.Type{resourceCheckT, cel.StringType}, decisionT, cel.FunctionBinding(unbound))),
		member("errored", "decision_errored", []*cel.Type{decisionT}, cel.BoolType),
		member("error", "decision_error", []*cel.Type{decisionT}, cel.StringType),
		member("allowed", "decision_allowed", []*cel.Type{decisionT}, cel.BoolType),
		member("reason", "decision_reason", []*cel.Type{decisionT}, cel.StringType),
	}
}

// compiledCondition is one matchCondition, compiled once per webhook.
type compiledCondition struct {
	name, expression string
	program          cel.Program
	compileErr       error
}

func compileCondition(name, expression string) compiledCondition {
	c := compiledCondition{name: name, expression: expression}
	c.program, c.compileErr = compileProgram(matchConditionEnv, expression, true)
	return c
}

// compileProgram compiles expression in the environment env builds, with
// kube-apiserver's program options. With wantBool it must be exactly bool,
// not dyn, as Kubernetes requires (plugin/cel/compile.go).
func compileProgram(env func() (*cel.Env, error), expression string, wantBool bool) (cel.Program, error) {
	e, err := env()
	if err != nil {
		return nil, err
	}
	ast, iss := e.Compile(expression)
	if iss != nil && iss.Err() != nil {
		return nil, iss.Err()
	}
	if wantBool && !ast.OutputType().IsExactType(cel.BoolType) {
		return nil, fmt.Errorf("must evaluate to bool but got %v", ast.OutputType())
	}
	return e.Program(ast, programOptions()...)
}

// programOptions are kube-apiserver's (environment/base.go, compile.go):
// cost tracked and limited per call, has() free, interrupts checked; plus
// partial evaluation, for what the audit does not model.
func programOptions() []cel.ProgramOption {
	return []cel.ProgramOption{
		cel.EvalOptions(cel.OptPartialEval, cel.OptTrackCost),
		cel.CostLimit(perCallLimit),
		cel.CostTrackerOptions(interpreter.PresenceTestHasCost(false)),
		cel.InterruptCheckFrequency(checkFrequency),
	}
}

// conditionResult is one condition's outcome for one request.
type conditionResult int

const (
	condTrue conditionResult = iota
	condFalse
	condError   // the expression errors at run time (Kubernetes applies the failure policy)
	condUnknown // depends on what the audit cannot model
)

func (c conditionResult) String() string {
	return [...]string{"true", "false", "error", "unknown"}[c]
}

// celInput is what a condition sees for one request.
type celInput struct {
	// ctx stops an evaluation (the operator's Ctrl-C); nil is never done.
	ctx context.Context
	// budget is what is left of the cost budget the evaluations share (a
	// webhook's matchConditions, a policy binding's expressions); nil: none.
	budget    *costBudget
	request   map[string]interface{}
	object    map[string]interface{}
	oldObject map[string]interface{}
	// extra binds the variables only policies have (params, variables).
	extra   map[string]interface{}
	unknown []*cel.AttributePatternType
}

func (c compiledCondition) eval(in celInput) (conditionResult, string) {
	if c.compileErr != nil {
		return condUnknown, "does not compile in the audit's CEL environment (a Kubernetes-only function, or params/variables): " + firstLine(c.compileErr.Error())
	}
	return evalBool(c.program, in)
}

// evalBool runs a program that yields a bool (a condition or a validation).
func evalBool(prg cel.Program, in celInput) (conditionResult, string) {
	val, res, detail := evalValue(prg, in)
	if res != condTrue {
		return res, detail
	}
	b, ok := val.(types.Bool)
	if !ok {
		return condError, fmt.Sprintf("evaluated to %v, not a bool", val)
	}
	if b {
		return condTrue, ""
	}
	return condFalse, ""
}

// evalValue runs a program with partial evaluation: condTrue means it
// produced val, else it errored or depends on what the model does not know.
func evalValue(prg cel.Program, in celInput) (ref.Val, conditionResult, string) {
	vars := map[string]interface{}{
		varRequest:         in.request,
		varNamespaceObject: nil,
	}
	if in.object != nil {
		vars[varObject] = in.object
	} else {
		vars[varObject] = nil
	}
	if in.oldObject != nil {
		vars[varOldObject] = in.oldObject
	} else {
		vars[varOldObject] = nil
	}
	for k, v := range in.extra {
		vars[k] = v
	}
	patterns := append([]*cel.AttributePatternType{
		cel.AttributePattern(varAuthorizer),
		cel.AttributePattern(varRequestResourceAuthorizer),
	}, in.unknown...)
	act, err := cel.PartialVars(vars, patterns...)
	if err != nil {
		return nil, condUnknown, err.Error()
	}
	ctx := in.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	val, det, err := prg.ContextEval(ctx, act)
	var cancelled interpreter.EvalCancelledError
	switch {
	case ctx.Err() != nil:
		return nil, condUnknown, "not evaluated: " + context.Cause(ctx).Error()
	case errors.As(err, &cancelled) && cancelled.Cause == interpreter.CostLimitExceeded:
		return nil, condUnknown, fmt.Sprintf("its evaluation goes over kube-apiserver's CEL cost limit (%d per expression), where kube-apiserver stops it with an error and the failure policy decides", perCallLimit)
	case err != nil:
		return nil, condError, firstLine(err.Error())
	}
	if why := in.budget.spend(det); why != "" {
		return nil, condUnknown, why
	}
	if types.IsUnknown(val) {
		return nil, condUnknown, "depends on " + describeUnknown(val)
	}
	if types.IsError(val) {
		return nil, condError, firstLine(fmt.Sprint(val))
	}
	return val, condTrue, ""
}

// costBudget is a cost budget shared by several evaluations, as
// kube-apiserver counts it.
type costBudget struct {
	left int64
	what string // e.g. "of one webhook's matchConditions for one request"
}

func newBudget(total int64, what string) *costBudget { return &costBudget{left: total, what: what} }

// spend takes an evaluation's cost from the budget: "" while it lasts, else
// why the evaluation is unknown.
func (b *costBudget) spend(det *cel.EvalDetails) string {
	if b == nil || det == nil || det.ActualCost() == nil {
		return ""
	}
	b.left -= int64(*det.ActualCost())
	if b.left >= 0 {
		return ""
	}
	return fmt.Sprintf("the evaluations go over kube-apiserver's CEL cost budget %s, where kube-apiserver stops with an error and the failure policy decides", b.what)
}

func describeUnknown(val ref.Val) string {
	u, ok := val.(*types.Unknown)
	if !ok {
		return "values the audit does not model"
	}
	// The attribute trail names what was unknown (e.g. authorizer, object.spec).
	s := u.String()
	switch {
	case strings.Contains(s, varAuthorizer):
		return "the authorizer, which the audit cannot model"
	default:
		return "values the audit does not model (" + strings.TrimSpace(exprIDs.ReplaceAllString(s, "")) + ")"
	}
}

// exprIDs are the expression ids cel-go appends to unknown attributes.
var exprIDs = regexp.MustCompile(` \(\d+\)`)

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// unknownPatterns marks what the model does not know of a request: object
// fields other than apiVersion, kind and the modelled metadata, per-cluster
// names, and the loopback identity's random UID.
func (r StartupRequest) unknownPatterns() []*cel.AttributePatternType {
	var p []*cel.AttributePatternType
	var roots []string
	if r.hasObject() {
		roots = append(roots, varObject)
	}
	if r.hasOldObject() {
		roots = append(roots, varOldObject)
	}
	for _, root := range roots {
		for _, f := range r.fields {
			p = append(p, cel.AttributePattern(root).QualString(f))
		}
		for _, f := range unmodelledMetadata {
			p = append(p, cel.AttributePattern(root).QualString("metadata").QualString(f))
		}
		if r.unknownName {
			p = append(p, cel.AttributePattern(root).QualString("metadata").QualString("name"))
		}
	}
	if r.unknownName {
		p = append(p, cel.AttributePattern(varRequest).QualString("name"))
	}
	p = append(p, cel.AttributePattern(varRequest).QualString("userInfo").QualString("uid"))
	return p
}

// toUnstructured converts like runtime.DefaultUnstructuredConverter, which is
// what Kubernetes uses for `request` (omitempty fields are absent).
func toUnstructured(obj interface{}) (map[string]interface{}, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, errors.New("model: " + err.Error())
	}
	return m, nil
}
