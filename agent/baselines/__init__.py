"""From-scratch learners that the memory agent is measured against (no pretrained language model).

`drrn`: a Deep Reinforcement Relevance Network (He et al. 2016) over the admissible actions,
learning from the environment's reward alone. Heavy libraries load only when these modules are
imported, so importing `crl.agent` stays cheap.
"""
