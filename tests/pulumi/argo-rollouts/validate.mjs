// Validates Argo Rollouts objects (JSON lines on stdin) with the schemas of
// @kubernetes-models/argo-rollouts 2.0.0, generated from argo-rollouts v1.9.0's Go types:
// the controller version of the pinned chart. Prints one JSON line per object: its errors.
import { createInterface } from "node:readline";
import { Rollout } from "@kubernetes-models/argo-rollouts/argoproj.io/v1alpha1/Rollout";
import { AnalysisTemplate } from "@kubernetes-models/argo-rollouts/argoproj.io/v1alpha1/AnalysisTemplate";

const MODELS = { Rollout, AnalysisTemplate };
for await (const line of createInterface({ input: process.stdin })) {
  const obj = JSON.parse(line);
  const Model = MODELS[obj.kind];
  let errors = [];
  if (!Model) {
    errors = [`no schema for kind ${obj.kind}`];
  } else {
    try {
      new Model(obj).validate();
    } catch (error) {
      errors = (error.errors || [error]).map((e) => `${e.instancePath || ""} ${e.message}`.trim());
    }
  }
  console.log(JSON.stringify({ kind: obj.kind, name: obj.metadata?.name, errors }));
}
