"""readiness"""
