from django.apps import AppConfig


class OracleConfig(AppConfig):
    name = "apps.oracle"
    label = "oracle"

    def ready(self):
        from lib.evaluators import register_evaluator
        from lib.metrics import register_metric

        # lazy paths: nothing is imported until a G-Eval judge is asked for
        register_evaluator("geval", "apps.oracle.geval:GEval", takes_argument=True)
        register_metric("geval", "apps.oracle.geval:GEvalMetric")
