"""The cost model and its features: a candidate's feature vector (:mod:`.features`, read from the
lowered program) and the gradient-boosted model that ranks candidates by it (:mod:`.model`),
pre-trained on other workloads' records.
"""
