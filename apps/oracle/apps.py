from django.apps import AppConfig


class OracleConfig(AppConfig):
    name = "apps.oracle"
    label = "oracle"

    def ready(self):
        from apps.chat.signals import interaction_finished
        from lib.evaluators import register_evaluator
        from lib.metrics import register_metric

        from .jobs import on_interaction_finished

        # every answer saved gets its evaluation job in the same transaction
        interaction_finished.connect(on_interaction_finished, dispatch_uid="oracle-evaluation-job")

        # lazy paths: nothing is imported until an evaluator is asked for
        register_evaluator("geval", "apps.oracle.geval:GEval", takes_argument=True)
        register_metric("geval", "apps.oracle.geval:GEvalMetric")
        # a debate between the running judge models (apps/oracle/debates.py), or of one judge alone
        # (debate:<judge>), and one judge's pairwise verdicts (pairwise:<judge>): apps/oracle/role_evaluators.py
        register_evaluator("debate", "apps.oracle.role_evaluators:debate_evaluator", argument_optional=True)
        register_evaluator("pairwise", "apps.oracle.role_evaluators:PairwiseJudge", takes_argument=True)
        # peer judging, by the other answers to the same question (lib/selfeval.py)
        register_evaluator("selfeval", "lib.selfeval:PeerJudge")
